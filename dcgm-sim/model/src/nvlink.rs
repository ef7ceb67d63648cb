//! NVLink throughput as NVML counts it and DCGM turns it into a rate. NVML answers
//! `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}` (scope UINT_MAX: all links) as KiB counters
//! that only grow; DCGM's fields 449 (`DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL`, alias
//! `..._BANDWIDTH_TOTAL`), 843 (TX) and 897 (RX) are no reading of their own but the rate
//! its cache manager computes between two of its samples of those counters
//! (`DcgmCacheManager::ReadAndCacheNvLinkBandwidth`, DCGM 4.6). Both simulators answer from
//! the same counters here, so the simulated DCGM's rate is the one an NVML client computes.

use crate::generator::{self, Generator, INT64_BLANK};
use crate::node::Gpu;
use crate::profile::NvmlFieldOverride;
use crate::Value;

/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` (nvml.h): KiB sent over the GPU's links.
pub const DATA_TX: u32 = 138;
/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`: KiB received.
pub const DATA_RX: u32 = 139;

/// The NVML counters DCGM sums for one of its rate fields, in the order it asks for them.
pub fn sources(field: u16) -> Option<&'static [u32]> {
    match field {
        449 => Some(&[DATA_RX, DATA_TX]),
        843 => Some(&[DATA_TX]),
        897 => Some(&[DATA_RX]),
        _ => None,
    }
}

/// The counter's generator on a GPU: the profile's last `[[nvml_fields]]` entry for it,
/// else a busy node's traffic on a GPU with links and nothing on one without (as the
/// kit's YAML injects 0 there).
fn generator_of(overrides: &[NvmlFieldOverride], gpu: &Gpu, id: u32) -> Generator {
    let found = overrides
        .iter()
        .rev()
        .find(|o| o.id == id && o.gpus.as_ref().is_none_or(|gs| gs.contains(&gpu.id)));
    match found {
        Some(o) => o.gen.clone(),
        None if gpu.links.is_empty() => Generator::Constant { value: 0.0 },
        // About 60 GB/s each way on average (an H100 moves up to 450 GB/s each way).
        None => Generator::Counter {
            per_s: if id == DATA_TX { 60.0e6 } else { 55.0e6 },
            start: None,
            jitter: 0.3,
            seed: None,
        },
    }
}

/// NVML's answer for counter `id` of `gpu` at `t_s` seconds after the start: KiB, or `None`
/// where the profile makes NVML refuse the field (a sentinel or error generator).
pub fn counter_kib(
    overrides: &[NvmlFieldOverride],
    seed: u64,
    gpu: &Gpu,
    id: u32,
    t_s: f64,
) -> Option<u64> {
    let key = generator::mix(
        seed ^ generator::mix(u64::from(gpu.id) << 40 ^ 0x4e56_4c00 ^ u64::from(id)),
    );
    match generator_of(overrides, gpu, id).eval(b'i', t_s, key) {
        (Value::Int64(v), 0) if v < INT64_BLANK => Some(v.max(0) as u64),
        _ => None,
    }
}

/// DCGM's rate from the summed counters of two samples: `now` = (sum, µs) of the new
/// sample, `prev` that of the sample before it (`None`: the watch has none). As DCGM:
/// 0 when the sum is 0, when there is no previous sample or no time between them; else
/// the KiB difference per second divided by 1000 ("KiB/s -> MiB/s"), truncated. A counter
/// that went back (driver reload) gives DCGM's negative value: it computes a signed
/// difference and publishes it.
pub fn rate(now: (i64, i64), prev: Option<(i64, i64)>) -> i64 {
    let (sum, ts) = now;
    let Some((prev_sum, prev_ts)) = prev else {
        return 0;
    };
    if sum == 0 {
        return 0;
    }
    let dt = (ts - prev_ts) as f64 / 1e6;
    if dt == 0.0 {
        return 0;
    }
    ((sum.wrapping_sub(prev_sum)) as f64 / dt / 1000.0) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_dcgms() {
        // 250.5 MiB/s for 0.5 s, truncated.
        assert_eq!(
            rate((1_125_250, 1_500_000), Some((1_000_000, 1_000_000))),
            250
        );
        // First sample, zero sum, no time: 0.
        assert_eq!(rate((5, 10), None), 0);
        assert_eq!(rate((0, 2_000_000), Some((7, 1_000_000))), 0);
        assert_eq!(rate((9, 1_000_000), Some((7, 1_000_000))), 0);
        // A counter reset: DCGM's signed difference, never a wrapped huge number.
        assert_eq!(rate((1_000, 2_000_000), Some((501_000, 1_000_000))), -500);
    }
}
