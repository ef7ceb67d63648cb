//! NVLink throughput as DCGM derives it from NVML's counters. NVML answers
//! `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}` (scope UINT_MAX: all links) as KiB counters
//! that only grow; DCGM's fields 449 (`DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL`, alias
//! `..._BANDWIDTH_TOTAL`), 843 (TX) and 897 (RX) are the rate its cache manager computes
//! between two of its samples of those counters
//! (`DcgmCacheManager::ReadAndCacheNvLinkBandwidth`, DCGM 4.6). Anything that reads the
//! counters through NVML and wants DCGM's numbers computes them here.

#![forbid(unsafe_code)]

/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` (nvml.h): KiB sent over the GPU's links.
pub const DATA_TX: u32 = 138;
/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`: KiB received.
pub const DATA_RX: u32 = 139;

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

    #[test]
    fn the_rate_truncates_toward_zero_both_ways_as_cs_cast() {
        assert_eq!(rate((2_999, 2_000_000), Some((0, 1_000_000))), 2);
        assert_eq!(rate((1, 2_000_000), Some((2_999, 1_000_000))), -2);
    }
}
