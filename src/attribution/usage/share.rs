//! Utilisation shares: a process's mean over the interval, and consumers' shares kept within
//! what the device itself reports (NVML's per-process samples and DCGM's device utilisation
//! are sampled separately; with time-slicing their sum can exceed the device's own value).

use crate::attribution::nvml::Process;

/// A process's mean SM utilisation (percent) over the interval: every NVML sample since the
/// previous collection, or the newest (`sm_util`) where NVML gave no list; 0 without either.
pub fn interval_mean(p: &Process) -> f64 {
    if p.samples.is_empty() {
        return f64::from(p.sm_util.unwrap_or(0));
    }
    let sum: f64 = p.samples.iter().map(|s| f64::from(s.sm_util)).sum();
    sum / p.samples.len() as f64
}

/// Whether the process did anything this interval: a sample above 0 or memory in use.
pub fn active(p: &Process) -> bool {
    p.samples.iter().any(|s| s.sm_util > 0)
        || (p.samples.is_empty() && p.sm_util.unwrap_or(0) > 0)
        || p.memory_bytes.unwrap_or(0) > 0
}

/// The processes on a device: every one of a whole GPU, or those of one GPU instance.
pub fn on_entity(procs: &[Process], gpu_instance: Option<u32>) -> impl Iterator<Item = &Process> {
    procs
        .iter()
        .filter(move |p| gpu_instance.is_none() || p.gpu_instance == gpu_instance)
}

/// Scales the shares down proportionally when they add up to more than `ceiling` (the
/// device's own utilisation), so that they add up to it; shares within it stay as they are.
pub fn clamp(shares: &mut [f64], ceiling: f64) {
    let ceiling = ceiling.max(0.0);
    let sum: f64 = shares.iter().sum();
    if sum > ceiling && sum > 0.0 {
        let k = ceiling / sum;
        for s in shares.iter_mut() {
            *s *= k;
        }
    }
}
