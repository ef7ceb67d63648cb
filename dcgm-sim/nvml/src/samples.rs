//! The driver's buffers of recent device samples (`nvmlDeviceGetSamples`): per GPU and
//! sampling type, samples on a fixed grid of the wall clock, each what the simulated DCGM
//! reads for the same field at that moment (`values::World`), in NVML's unit. A buffer is
//! started (filled back over what it keeps) the first time a client asks for it, and from
//! then on sampled up to each call before that call's control lines apply, so a fault
//! shows from the moment it is read in and never rewrites the samples before it (a
//! `spike` line's samples are the ones in its window). A lost GPU takes no samples.

#![forbid(unsafe_code)]

use crate::ffi;
use dcgm_sim_model::fields::FieldMeta;
use dcgm_sim_model::generator::{FP64_BLANK, INT64_BLANK};
use dcgm_sim_model::values::{World, ST_OK};
use dcgm_sim_model::{Value, FE_GPU};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_uint;

/// Per sampling type: the DCGM field it is read from, NVML's unit per DCGM unit, and the
/// sample period (µs): power and clocks every 100 ms, utilisation every 1/6 s (nvml.h: a
/// utilisation sample period is between 1/6 s and 1 s, depending on the product).
const KINDS: [(c_uint, u16, f64, u64); 7] = [
    (ffi::TOTAL_POWER_SAMPLES, 155, 1000.0, 100_000),
    (ffi::GPU_UTILIZATION_SAMPLES, 203, 1.0, 166_667),
    (ffi::MEMORY_UTILIZATION_SAMPLES, 204, 1.0, 166_667),
    (ffi::ENC_UTILIZATION_SAMPLES, 206, 1.0, 166_667),
    (ffi::DEC_UTILIZATION_SAMPLES, 207, 1.0, 166_667),
    (ffi::PROCESSOR_CLK_SAMPLES, 100, 1.0, 100_000),
    (ffi::MEMORY_CLK_SAMPLES, 101, 1.0, 100_000),
];

/// Samples a buffer keeps (the newest).
pub const KEPT: usize = 1200;

/// One buffer: the grid time of the newest sample due, and the samples kept, oldest first.
struct Ring {
    kind: usize,
    meta: &'static FieldMeta,
    through_us: u64,
    samples: VecDeque<ffi::Sample>,
}

/// Every buffer a client has asked for, by (GPU id, sampling type).
#[derive(Default)]
pub struct DeviceSamples {
    rings: BTreeMap<(u32, c_uint), Ring>,
    /// When the next sample of any buffer falls due (µs): before it, bringing the buffers
    /// up to date has nothing to do. Every NVML call does it, so it must cost nothing then,
    /// as a driver's own sampling costs its clients nothing.
    next_due_us: u64,
}

impl DeviceSamples {
    /// Takes every started buffer's samples due by `now_us`, with the world as it is.
    pub fn catch_up(&mut self, world: &World, now_us: u64) {
        if now_us < self.next_due_us {
            return;
        }
        for (&(gpu, _), ring) in self.rings.iter_mut() {
            ring.catch_up(world, gpu, now_us);
        }
        self.next_due_us = self
            .rings
            .values()
            .map(Ring::next_due_us)
            .min()
            .unwrap_or(0);
    }

    /// The samples of GPU `gpu`'s buffer `kind` newer than `last_seen`, oldest first, at
    /// most `room`; the buffer is started (filled back) when first asked for. `None` for a
    /// sampling type the simulator keeps no buffer of.
    pub fn newer(
        &mut self,
        world: &World,
        gpu: u32,
        kind: c_uint,
        last_seen: u64,
        now_us: u64,
    ) -> Option<Vec<ffi::Sample>> {
        let k = KINDS.iter().position(|x| x.0 == kind)?;
        let meta = dcgm_sim_model::fields::by_id(KINDS[k].1)?;
        let ring = self.rings.entry((gpu, kind)).or_insert_with(|| {
            let period = KINDS[k].3;
            Ring {
                kind: k,
                meta,
                through_us: (now_us / period).saturating_sub(KEPT as u64) * period,
                samples: VecDeque::new(),
            }
        });
        ring.catch_up(world, gpu, now_us);
        self.next_due_us = self.next_due_us.min(ring.next_due_us());
        let first = ring.samples.partition_point(|s| s.time_stamp <= last_seen);
        Some(ring.samples.range(first..).copied().collect())
    }
}

impl Ring {
    /// The grid time of the sample after the newest taken.
    fn next_due_us(&self) -> u64 {
        let period = KINDS[self.kind].3;
        (self.through_us / period + 1) * period
    }

    fn catch_up(&mut self, world: &World, gpu: u32, now_us: u64) {
        let (_, _, scale, period) = KINDS[self.kind];
        let last = now_us / period;
        if last <= self.through_us / period {
            // Nothing due since the last call (most calls).
            return;
        }
        let first = (self.through_us / period + 1).max(last.saturating_sub(KEPT as u64));
        for n in first..=last {
            let t = n * period;
            let prev = (t - period) as i64;
            let (value, status) = world.read((FE_GPU, gpu), self.meta, t as i64, prev);
            let v = match value {
                _ if status != ST_OK => continue,
                Value::Int64(i) if i < INT64_BLANK => i as f64,
                Value::Double(d) if d < FP64_BLANK => d,
                // A blank (a lost GPU), a sentinel: no sample.
                _ => continue,
            };
            let v = (v.max(0.0) * scale).round().min(f64::from(u32::MAX)) as u32;
            self.samples.push_back(ffi::Sample::uint(t, v));
        }
        self.through_us = self.through_us.max(last * period);
        while self.samples.len() > KEPT {
            self.samples.pop_front();
        }
    }
}
