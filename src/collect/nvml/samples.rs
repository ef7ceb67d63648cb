//! Sub-interval aggregation on the NVML backend (`collect::aggregate`): the driver keeps a
//! buffer of recent samples of a GPU's power, utilisation and clocks, read with
//! `nvmlDeviceGetSamples` (through nvml-wrapper's `Device::samples`), every sample newer
//! than the last one read. NVML samples at the driver's own pace (`--aggregate-period`
//! applies to DCGM only) and keeps what its buffer holds: `_interval_samples` says how many
//! a window had. A field NVML keeps no samples of (the GPU temperature, ...) is named at
//! start and not aggregated.
//!
//! Each GPU's read position is its own and starts, when the collector is built, after the
//! newest sample the driver holds then (or, where that read failed, at its first read that
//! succeeds; NVML's timestamps are its own clock: nothing is compared with ours): a
//! collector built anew (a reload, a failover to NVML) never counts samples of the windows
//! before it. A MIG instance shows its GPU's aggregates, as it shows its GPU's gauge. A
//! refused read (the GPU lost, NVML failing) costs that GPU's aggregates.

use super::ActiveSet;
use crate::collect::aggregate::{self, Acc, Row};
use crate::config::counters::Counters;
use crate::model::Page;
use dcgm_sys::Entity;
use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::{BTreeMap, HashMap};

/// The NVML sample buffer a DCGM field is read from, and the factor from NVML's unit to
/// DCGM's (power: mW -> W, as DCGM converts `nvmlDeviceGetPowerUsage`).
fn sampling(field: u16) -> Option<(Sampling, f64)> {
    Some(match field {
        // DCGM_FI_DEV_SM_CLOCK: NVML's processor (graphics/SM) clock samples, MHz.
        100 => (Sampling::ProcessorClock, 1.0),
        101 => (Sampling::MemoryClock, 1.0),
        155 => (Sampling::Power, 1.0 / 1000.0),
        203 => (Sampling::GpuUtilization, 1.0),
        204 => (Sampling::MemoryUtilization, 1.0),
        206 => (Sampling::EncoderUtilization, 1.0),
        207 => (Sampling::DecoderUtilization, 1.0),
        _ => return None,
    })
}

fn number(v: &SampleValue) -> f64 {
    match *v {
        SampleValue::F64(f) => f,
        SampleValue::U32(u) => f64::from(u),
        SampleValue::U64(u) => u as f64,
        SampleValue::I64(i) => i as f64,
    }
}

/// The aggregated rows NVML keeps samples of, and each (GPU, field)'s read position.
#[derive(Default)]
pub(super) struct Samples {
    rows: Vec<Row>,
    /// (NVML GPU index, DCGM field) -> the newest sample's timestamp read (NVML's clock).
    last_seen: BTreeMap<(u32, u16), u64>,
    /// Reads that failed in a row, per pair (as `aggregate::Cursor::missed`).
    missed: BTreeMap<(u32, u16), u32>,
    /// The collection interval (µs): after more than one failed read, the next window
    /// counts this much before the newest sample.
    interval_us: u64,
}

impl Samples {
    /// The rows of `set` to aggregate, each GPU's read position set after the newest sample
    /// NVML holds now.
    pub(super) fn start(
        nvml: &Nvml,
        settings: &crate::collect::Settings,
        counters: &Counters,
        set: Option<&ActiveSet>,
    ) -> Samples {
        let (options, interval_ms) = (&settings.aggregate, settings.interval_ms);
        let (Some(set), true) = (set, options.is_on()) else {
            return Samples::default();
        };
        let indices: Vec<usize> = set.value_rows.iter().map(|r| r.0).collect();
        let (rows, refused): (Vec<Row>, Vec<Row>) = aggregate::rows(options, counters, &indices)
            .into_iter()
            .partition(|r| sampling(r.field).is_some());
        for r in &refused {
            tracing::warn!(
                "not aggregating {}: NVML keeps no samples of field {} (--backend nvml)",
                counters.all[r.index].name,
                r.field
            );
        }
        let all: Vec<&Row> = rows.iter().chain(&refused).collect();
        aggregate::warn_unmatched(options, counters, &all);
        let mut out = Samples {
            rows,
            last_seen: BTreeMap::new(),
            missed: BTreeMap::new(),
            interval_us: interval_ms.saturating_mul(1000),
        };
        for key in out.pairs(set) {
            // Only the position: the samples before the collector are not its own. A buffer
            // that cannot be read now gets its position at its first read (`advance`).
            if let Ok(samples) = read(&mut Devices::new(nvml), key, 0) {
                out.last_seen.insert(key, newest(&samples).unwrap_or(0));
            }
        }
        out
    }

    /// The (GPU, field) pairs the rows need on the set's targets.
    fn pairs(&self, set: &ActiveSet) -> Vec<(u32, u16)> {
        let mut out = Vec::new();
        for t in &set.set.targets {
            let gpu = t.gpu.unwrap_or(t.entity.id);
            for r in &self.rows {
                if !out.contains(&(gpu, r.field)) {
                    out.push((gpu, r.field));
                }
            }
        }
        out
    }

    /// Reads every GPU's new samples and adds the rows' series for the targets read in
    /// this collection (those in `csv_labels`).
    pub(super) fn collect(
        &mut self,
        nvml: &Nvml,
        set: &ActiveSet,
        counters: &Counters,
        csv_labels: &HashMap<Entity, Vec<(String, String)>>,
        page: &mut Page,
    ) {
        if self.rows.is_empty() {
            return;
        }
        let mut per_gpu: HashMap<(u32, u16), Acc> = HashMap::new();
        let mut devices = Devices::new(nvml);
        for key in self.pairs(set) {
            let since = self.last_seen.get(&key).copied();
            match read(&mut devices, key, since.unwrap_or(0)) {
                Ok(samples) => {
                    let missed = self.missed.remove(&key).unwrap_or(0);
                    let from = window_start(since, missed, &samples, self.interval_us);
                    let acc = per_gpu.entry(key).or_default();
                    self.last_seen.insert(key, advance(from, &samples, acc));
                }
                Err(e) => {
                    *self.missed.entry(key).or_default() += 1;
                    tracing::debug!("nvmlDeviceGetSamples of GPU {} field {}: {e}", key.0, key.1);
                    page.piece_failed("sub-interval samples", &format!("{e:?}"));
                }
            }
        }
        let mut windows = aggregate::Windows::default();
        let mut targets = Vec::new();
        for t in set
            .set
            .targets
            .iter()
            .filter(|t| csv_labels.contains_key(&t.entity))
        {
            let gpu = t.gpu.unwrap_or(t.entity.id);
            for r in &self.rows {
                if let Some(acc) = per_gpu.get(&(gpu, r.field)) {
                    windows.insert((t.entity, r.field), *acc);
                }
            }
            targets.push((t.entity, t.labels_with(csv_labels)));
        }
        for r in &self.rows {
            r.add_to(&counters.all[r.index], &targets, &windows, page);
        }
    }
}

/// Counts the samples newer than the read position `since` into `acc` and returns the new
/// position. Without a position (the collector's build could not read the buffer) nothing
/// is counted, since the buffer may hold samples older than the collector: its newest
/// sample becomes the position, and the next window counts from there.
fn advance(since: Option<u64>, samples: &[(u64, f64)], acc: &mut Acc) -> u64 {
    let Some(since) = since else {
        return newest(samples).unwrap_or(0);
    };
    for &(_, v) in samples.iter().filter(|s| s.0 > since) {
        acc.add(v);
    }
    newest(samples).map_or(since, |n| n.max(since))
}

/// Where a window's samples start: the read position, or after more failed reads in a row
/// than a window makes up for (`aggregate::MADE_UP_FOR`), one interval before the newest
/// sample (the window then says it began at the previous collection).
fn window_start(
    since: Option<u64>,
    missed: u32,
    samples: &[(u64, f64)],
    interval_us: u64,
) -> Option<u64> {
    match since {
        Some(s) if missed > aggregate::MADE_UP_FOR => {
            Some(s.max(newest(samples).unwrap_or(0).saturating_sub(interval_us)))
        }
        _ => since,
    }
}

/// The newest timestamp of `samples`.
fn newest(samples: &[(u64, f64)]) -> Option<u64> {
    samples.iter().map(|s| s.0).max()
}

/// The GPUs' handles, each asked of NVML once per collection.
struct Devices<'a> {
    nvml: &'a Nvml,
    by_index: HashMap<u32, Result<Device<'a>, NvmlError>>,
}

impl<'a> Devices<'a> {
    fn new(nvml: &'a Nvml) -> Devices<'a> {
        Devices {
            nvml,
            by_index: HashMap::new(),
        }
    }
}

/// The samples of `key`'s buffer newer than `since` as (NVML timestamp, value in DCGM's
/// unit); none newer is an empty answer (NVML: NOT_FOUND).
fn read(
    devices: &mut Devices<'_>,
    (gpu, field): (u32, u16),
    since: u64,
) -> Result<Vec<(u64, f64)>, NvmlError> {
    let Some((kind, scale)) = sampling(field) else {
        return Ok(Vec::new());
    };
    let nvml = devices.nvml;
    let device = devices
        .by_index
        .entry(gpu)
        .or_insert_with(|| nvml.device_by_index(gpu));
    let device = match device {
        Ok(d) => d,
        Err(e) => return Err(copy(e)),
    };
    match device.samples(kind, since) {
        Ok(s) => Ok(s
            .iter()
            .map(|x| (x.timestamp, number(&x.value) * scale))
            .collect()),
        Err(NvmlError::NotFound) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// An error of the handle, again (`NvmlError` is not `Clone`): what a read of that GPU says.
fn copy(e: &NvmlError) -> NvmlError {
    match e {
        NvmlError::GpuLost => NvmlError::GpuLost,
        NvmlError::NotSupported => NvmlError::NotSupported,
        NvmlError::InvalidArg => NvmlError::InvalidArg,
        NvmlError::NotFound => NvmlError::NotFound,
        _ => NvmlError::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffers_are_nvmls_own_for_the_fields_dcgm_reads_from_them() {
        assert_eq!(sampling(155), Some((Sampling::Power, 0.001)));
        assert_eq!(sampling(100).map(|s| s.0), Some(Sampling::ProcessorClock));
        assert_eq!(
            sampling(204).map(|s| s.0),
            Some(Sampling::MemoryUtilization)
        );
        // No NVML buffer of temperatures.
        assert_eq!(sampling(150), None);
        assert_eq!(number(&SampleValue::U32(250_000)) * 0.001, 250.0);
    }

    #[test]
    fn a_buffer_the_build_could_not_read_counts_only_samples_after_its_first_read() {
        let buffer = [(10, 900.0), (20, 300.0), (30, 310.0)];
        // Read at the build: only the position.
        let mut acc = Acc::default();
        assert_eq!(advance(None, &buffer, &mut acc), 30);
        assert_eq!(acc.count, 0);
        // Not read at the build: the first read also only sets it (the 900 W sample may
        // be the previous collector's), and the next counts what is newer.
        assert_eq!(advance(None, &buffer, &mut acc), 30);
        assert_eq!(acc.count, 0);
        let later = [(20, 300.0), (30, 310.0), (40, 320.0), (50, 330.0)];
        assert_eq!(advance(Some(30), &later, &mut acc), 50);
        assert_eq!((acc.count, acc.min, acc.max), (2, 320.0, 330.0));
        // Nothing newer: the position stays; an empty buffer has none to set.
        assert_eq!(advance(Some(50), &[], &mut acc), 50);
        assert_eq!(advance(None, &[], &mut acc), 0);
    }

    #[test]
    fn after_reads_that_failed_twice_a_window_counts_its_last_interval() {
        let buffer = [(100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0)];
        // One failed read: the next window holds everything since the position.
        assert_eq!(window_start(Some(100), 1, &buffer, 150), Some(100));
        // Two or more: the last interval before the newest sample.
        assert_eq!(window_start(Some(100), 2, &buffer, 150), Some(250));
        let mut acc = Acc::default();
        assert_eq!(
            advance(window_start(Some(100), 3, &buffer, 150), &buffer, &mut acc),
            400
        );
        assert_eq!((acc.count, acc.min, acc.max), (2, 3.0, 4.0));
        // Never before the position, never a position where there was none.
        assert_eq!(window_start(Some(350), 2, &buffer, 150), Some(350));
        assert_eq!(window_start(None, 5, &buffer, 150), None);
        assert_eq!(acc.count, 2);
    }
}
