//! NVLink throughput (`DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL` = `..._BANDWIDTH_TOTAL`, 449,
//! and its TX / RX halves 843 / 897) as DCGM computes it
//! (`DcgmCacheManager::ReadAndCacheNvLinkBandwidth`, DCGM 4.6): NVML counts KiB moved over
//! all links (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{RX,TX}`, scope UINT_MAX, one
//! `nvmlDeviceGetFieldValues` call for both); the field is the rate of their sum between
//! two samples, here those of consecutive collections. As DCGM: 0 on the first sample, on
//! a zero sum and with no time between samples; else the KiB difference per second / 1000,
//! truncated, signed (a counter that went back gives DCGM's negative value). A refused
//! call or field gives no value and keeps the previous sample, as DCGM stores nothing then.

use super::{Answer, Answers, On, Refused};
use crate::collect::nvml::table::{Call, Direction, Row};
use crate::collect::targets::Target;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::collections::HashMap;

/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` (nvml.h).
const DATA_TX: u32 = 138;
/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`.
const DATA_RX: u32 = 139;

/// The previous sample (KiB sum, µs) of each (GPU, direction). A new collector (a rebuild,
/// a failover to NVML) starts without: its first value is 0, as a new DCGM watch's.
#[derive(Default)]
pub struct Rates {
    prev: HashMap<(u32, Direction), (i64, i64)>,
}

impl Rates {
    /// Reads the counters of every GPU a throughput row is asked of and stores the rates
    /// among this collection's answers (one call per GPU and direction, whatever number of
    /// targets share it).
    pub fn sample(
        &mut self,
        nvml: &Nvml,
        targets: &[Target],
        rows: &[&Row],
        answers: &mut Answers,
    ) {
        for t in targets {
            for r in rows {
                let Call::NvLinkThroughput(dir) = r.call else {
                    continue;
                };
                let on = On::of(t, r, &answers.gis);
                let On::Gpu(gpu) = on else { continue };
                if answers.answers.contains_key(&(on, r.call)) {
                    continue;
                }
                let answer = self
                    .next(nvml, gpu, dir)
                    .map(|v| Answer::Numbers([v as f64, 0.0, 0.0, 0.0]));
                answers.answers.insert((on, r.call), answer);
            }
        }
    }

    fn next(&mut self, nvml: &Nvml, gpu: u32, dir: Direction) -> Result<i64, Refused> {
        let ids: &[u32] = match dir {
            Direction::All => &[DATA_RX, DATA_TX],
            Direction::Tx => &[DATA_TX],
            Direction::Rx => &[DATA_RX],
        };
        let device = nvml.device_by_index(gpu).map_err(refused)?;
        let got = dcgm_sys::nvml_ext::all_links_field_values(&device, ids).map_err(refused)?;
        let mut sum = 0i64;
        let mut ts = 0i64;
        for v in got {
            let (kib, at) = v.map_err(refused)?;
            // DCGM's `long long` sum of the unsigned counters.
            sum = sum.wrapping_add(kib as i64);
            ts = ts.max(at);
        }
        if ts == 0 {
            ts = crate::model::clock::now_us();
        }
        let prev = self.prev.insert((gpu, dir), (sum, ts));
        Ok(rate((sum, ts), prev))
    }
}

fn refused(e: NvmlError) -> Refused {
    match e {
        NvmlError::NotSupported => Refused::NotSupported,
        _ => Refused::Failed,
    }
}

/// DCGM's rate of a new sample `now` = (KiB sum, µs) against the previous one.
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
    // DCGM: (double) difference / seconds / 1000 ("KiB/s -> MiB/s"), cast to long long.
    (sum.wrapping_sub(prev_sum) as f64 / dt / 1000.0) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_dcgms_own() {
        // 250.5 MiB/s over half a second: truncated.
        assert_eq!(
            rate((1_125_250, 1_500_000), Some((1_000_000, 1_000_000))),
            250
        );
        // No previous sample, a zero sum, no time between the samples: 0.
        assert_eq!(rate((5_000, 10), None), 0);
        assert_eq!(rate((0, 2_000_000), Some((7, 1_000_000))), 0);
        assert_eq!(rate((9_000, 1_000_000), Some((7, 1_000_000))), 0);
        // Truncated toward zero both ways, as C's cast.
        assert_eq!(rate((2_999, 2_000_000), Some((0, 1_000_000))), 2);
        assert_eq!(rate((1, 2_000_000), Some((2_999, 1_000_000))), -2);
        // A counter reset (driver reload): DCGM's signed difference, never a wrapped huge
        // unsigned number.
        assert_eq!(rate((1_000, 2_000_000), Some((501_000, 1_000_000))), -500);
    }
}
