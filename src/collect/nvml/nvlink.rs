//! NVLink throughput (`DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL` = `..._BANDWIDTH_TOTAL`, 449,
//! and its TX / RX halves 843 / 897) as DCGM computes it
//! (`DcgmCacheManager::ReadAndCacheNvLinkBandwidth`, DCGM 4.6): NVML counts KiB moved over
//! all links (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{RX,TX}`, scope UINT_MAX, one
//! `nvmlDeviceGetFieldValues` call for both); the field is the rate of their sum between
//! two samples, here those of consecutive collections. As DCGM: 0 on the first sample, on
//! a zero sum and with no time between samples; else the KiB difference per second / 1000,
//! truncated, signed (a counter that went back gives DCGM's negative value). A refused
//! call or field gives no value and keeps the previous sample, as DCGM stores nothing then.

use super::{refused, Answer, Answers, On, Refused};
use crate::collect::nvml::table::{Call, Direction, Row};
use crate::collect::targets::Target;
use dcgm_sys::nvlink::{rate, DATA_RX, DATA_TX};
use nvml_wrapper::Nvml;
use std::collections::HashMap;

/// The previous sample (KiB sum, µs) of each (GPU, direction). A new collector (a rebuild,
/// a failover to NVML) starts without: its first value is 0, as a new DCGM watch's.
#[derive(Default)]
pub(super) struct Rates {
    prev: HashMap<(u32, Direction), (i64, i64)>,
}

impl Rates {
    /// Reads the counters of every GPU a throughput row is asked of and stores the rates
    /// among this collection's answers (one call per GPU and direction, whatever number of
    /// targets share it).
    pub(super) fn sample(
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
        let device = nvml.device_by_index(gpu).map_err(|e| refused(&e))?;
        let got =
            dcgm_sys::nvml_ext::all_links_field_values(&device, ids).map_err(|e| refused(&e))?;
        let mut sum = 0i64;
        let mut ts = 0i64;
        for v in got {
            let (kib, at) = v.map_err(|e| refused(&e))?;
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
