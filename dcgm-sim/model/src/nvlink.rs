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

pub use dcgm_sys::nvlink::{rate, DATA_RX, DATA_TX};

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
