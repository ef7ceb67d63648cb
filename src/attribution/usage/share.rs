//! Utilisation shares: a process's mean over the interval, and consumers' shares kept within
//! what the device itself reports (NVML's per-process samples and DCGM's device utilisation
//! are sampled separately; with time-slicing their sum can exceed the device's own value).

use crate::attribution::nvml::{Process, UtilSample};
use std::collections::{HashMap, HashSet};

/// A process's mean SM utilisation (percent) over the interval: every NVML sample since the
/// previous collection, or the newest (`sm_util`) where NVML gave no list; 0 without either.
pub(crate) fn interval_mean(p: &Process) -> f64 {
    if p.samples.is_empty() {
        return f64::from(p.sm_util.unwrap_or(0));
    }
    let sum: f64 = p.samples.iter().map(|s| f64::from(s.sm_util)).sum();
    sum / p.samples.len() as f64
}

/// Whether the process did anything this interval: a sample above 0 or memory in use.
pub(crate) fn active(p: &Process) -> bool {
    p.samples.iter().any(|s| s.sm_util > 0)
        || (p.samples.is_empty() && p.sm_util.unwrap_or(0) > 0)
        || p.memory_bytes.unwrap_or(0) > 0
}

/// The processes on a device: every one of a whole GPU, or those of one GPU instance.
pub(crate) fn on_entity(
    procs: &[Process],
    gpu_instance: Option<u32>,
) -> impl Iterator<Item = &Process> {
    procs
        .iter()
        .filter(move |p| gpu_instance.is_none() || p.gpu_instance == gpu_instance)
}

/// Scales the shares down proportionally when they add up to more than `ceiling` (the
/// device's own utilisation), so that they add up to it; shares within it stay as they are.
pub(crate) fn clamp(shares: &mut [f64], ceiling: f64) {
    let ceiling = ceiling.max(0.0);
    let sum: f64 = shares.iter().sum();
    if sum > ceiling && sum > 0.0 {
        let k = ceiling / sum;
        for s in shares.iter_mut() {
            *s *= k;
        }
    }
}

/// Collections in a row a GPU's last samples stand in for asks that got none, at most.
pub(crate) const MAX_CARRY: usize = 10;

/// The last utilisation samples of each GPU's processes, for the asks that get none. NVML
/// answers only the samples newer than the previous ask; a collection interval shorter
/// than the driver's sampling period gets none every other time, which says nothing about
/// the processes (an idle GPU is told by DCGM's own utilisation, which the shares are
/// clamped to). So an ask without a single sample for any process of a GPU reuses the
/// previous samples, for `MAX_CARRY` collections at most.
#[derive(Debug, Default)]
pub(crate) struct Carry {
    /// GPU UUID -> (pid -> its last samples, collections carried since).
    gpus: HashMap<String, (HashMap<u32, Vec<UtilSample>>, usize)>,
}

impl Carry {
    /// Fills in the previous samples of `gpu`'s processes when this ask got none.
    pub(crate) fn fill(&mut self, gpu: &str, procs: &mut [Process]) {
        let sampled = procs
            .iter()
            .any(|p| !p.samples.is_empty() || p.sm_util.is_some());
        if sampled {
            let last = procs
                .iter()
                .map(|p| (p.pid, samples_of(p)))
                .filter(|(_, s)| !s.is_empty())
                .collect();
            self.gpus.insert(gpu.to_string(), (last, 0));
            return;
        }
        let Some((last, carried)) = self.gpus.get_mut(gpu) else {
            return;
        };
        if *carried >= MAX_CARRY {
            return;
        }
        *carried += 1;
        for p in procs.iter_mut() {
            if let Some(s) = last.get(&p.pid) {
                p.samples.clone_from(s);
                p.sm_util = s.last().map(|x| x.sm_util);
            }
        }
    }

    /// Forgets the GPUs not in `gpus` (gone from the node).
    pub(crate) fn keep(&mut self, gpus: &HashSet<&str>) {
        self.gpus.retain(|g, _| gpus.contains(g.as_str()));
    }
}

/// A process's samples; the newest value alone where NVML gave no list.
fn samples_of(p: &Process) -> Vec<UtilSample> {
    match (&p.samples[..], p.sm_util) {
        ([], Some(v)) => vec![UtilSample {
            timestamp_us: 0,
            sm_util: v,
        }],
        (s, _) => s.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, samples: &[u32]) -> Process {
        Process {
            pid,
            gpu_instance: None,
            sm_util: samples.last().copied(),
            samples: samples
                .iter()
                .enumerate()
                .map(|(i, s)| UtilSample {
                    timestamp_us: i as u64 + 1,
                    sm_util: *s,
                })
                .collect(),
            memory_bytes: None,
        }
    }

    #[test]
    fn an_ask_without_samples_reuses_the_previous_ones_a_bounded_number_of_times() {
        let mut c = Carry::default();
        let mut first = vec![proc(1, &[60, 60]), proc(2, &[20]), proc(3, &[])];
        c.fill("GPU-0", &mut first);
        // The next ask: no sample for any process (no sampling period ended).
        let mut empty = vec![proc(1, &[]), proc(2, &[]), proc(4, &[])];
        c.fill("GPU-0", &mut empty);
        assert_eq!(interval_mean(&empty[0]), 60.0);
        assert_eq!(interval_mean(&empty[1]), 20.0);
        assert_eq!(empty[1].sm_util, Some(20));
        assert_eq!(
            interval_mean(&empty[2]),
            0.0,
            "a new process has nothing to reuse"
        );
        // One process with a sample: the ask says something, the others were idle.
        let mut some = vec![proc(1, &[]), proc(2, &[35])];
        c.fill("GPU-0", &mut some);
        assert_eq!(interval_mean(&some[0]), 0.0);
        assert_eq!(interval_mean(&some[1]), 35.0);
        // At most MAX_CARRY asks in a row.
        for i in 0..=MAX_CARRY {
            let mut empty = vec![proc(2, &[])];
            c.fill("GPU-0", &mut empty);
            let want = if i < MAX_CARRY { 35.0 } else { 0.0 };
            assert_eq!(interval_mean(&empty[0]), want, "ask {i}");
        }
        // Another GPU's samples are its own; a GPU gone is forgotten.
        let mut other = vec![proc(2, &[])];
        c.fill("GPU-1", &mut other);
        assert_eq!(interval_mean(&other[0]), 0.0);
        c.keep(&HashSet::from(["GPU-1"]));
        assert!(c.gpus.is_empty());
    }
}
