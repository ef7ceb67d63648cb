//! The usage families on the page, each series with its device's identity labels (as on its
//! energy and utilisation series) and, per consumer, the consumer's labels.

use super::ledger::{Book, ConsumerBook};
use crate::model::naming::PromType;
use crate::model::Page;
use std::time::{Duration, Instant};

pub(crate) const ENERGY: &str = "DCGM_EXP_ENERGY_JOULES_TOTAL";
pub(crate) const IDLE_ENERGY: &str = "DCGM_EXP_IDLE_ENERGY_JOULES_TOTAL";
pub(crate) const UTIL_SHARE: &str = "DCGM_EXP_UTIL_SHARE";
pub(crate) const ALLOCATED_IDLE: &str = "DCGM_EXP_ALLOCATED_IDLE";

const ENERGY_HELP: &str = "Energy of the device attributed to the consumer by its share of the device's utilisation, since the consumer was first seen on it (in J).";
const IDLE_ENERGY_HELP: &str =
    "Energy of the device that no consumer used, since the device was first seen (in J).";
const UTIL_SHARE_HELP: &str =
    "Consumer's share of the device's utilisation over the last collection interval (in %).";
const ALLOCATED_IDLE_HELP: &str = "1 when the consumer has held the device for longer than --usage-idle-window with no utilisation and no memory in use, else 0.";

/// One device's series: idle energy, and per consumer with series its energy, share and
/// allocated-but-idle gauge. Energy only once the device has reported energy.
pub(crate) fn add(
    page: &mut Page,
    identity: &[(String, String)],
    book: &Book,
    now: Instant,
    window: Duration,
) {
    let id: Vec<(&str, &str)> = identity
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let energy = book.last_energy_mj.is_some();
    if energy {
        page.add(
            IDLE_ENERGY,
            IDLE_ENERGY_HELP,
            PromType::Counter,
            &id,
            book.idle_j,
        );
    }
    let mut shown: Vec<(&Vec<(String, String)>, &ConsumerBook)> = book
        .consumers
        .iter()
        .filter(|(_, c)| c.known && !c.capped)
        .collect();
    shown.sort_by_key(|(_, c)| c.seq);
    for (consumer, c) in shown {
        let mut labels = id.clone();
        for (k, v) in consumer {
            // A label the device's series already have (a CSV label field) is not repeated.
            if !labels.iter().any(|(n, _)| n == k) {
                labels.push((k, v));
            }
        }
        if energy {
            page.add(ENERGY, ENERGY_HELP, PromType::Counter, &labels, c.energy_j);
        }
        // Unknown until NVML first answers for the device.
        if let Some(share) = c.share {
            page.add(UTIL_SHARE, UTIL_SHARE_HELP, PromType::Gauge, &labels, share);
        }
        let idle = if c.idle(now, window) { 1.0 } else { 0.0 };
        page.add(
            ALLOCATED_IDLE,
            ALLOCATED_IDLE_HELP,
            PromType::Gauge,
            &labels,
            idle,
        );
    }
}
