//! Usage-accounting consumers outside Kubernetes (`--usage-accounting` with
//! `--container-labels` or `--hpc-job-mapping-dir`): the containers the runtime says hold a
//! GPU or MIG device and the jobs the HPC files put on a GPU or GPU instance; whose each GPU
//! process is comes from `pids::owner_of_pid` (pod, container or Slurm job). The accountant
//! (`usage`) treats them as it treats pods: one holder alone gets its whole device, several
//! share it by their processes' utilisation.

use super::device_ids::MigLocation;
use super::usage::{Consumer, EntityKey, Owner};
use std::collections::HashMap;

/// The label HPC jobs' series carry, as on every series of the GPU (`merge`).
pub(super) const HPC_JOB_LABEL: &str = "hpc_job";

/// Adds a consumer to an entity's list, once (a container named twice for one device, a
/// job listed twice in its file).
fn add(into: &mut HashMap<EntityKey, Vec<Consumer>>, key: EntityKey, c: Consumer) {
    let list = into.entry(key).or_default();
    if !list.contains(&c) {
        list.push(c);
    }
}

/// The device-label sources' consumers on their entities: a GPU UUID is the whole GPU; a
/// MIG device its GPU instance, when `place` (NVML, through the MIG placer) knows where it
/// is; one it cannot place is left out, as its labels are (the placer reports it).
pub(super) fn place_consumers(
    held: Vec<(String, Consumer)>,
    place: impl Fn(&str) -> Option<MigLocation>,
    into: &mut HashMap<EntityKey, Vec<Consumer>>,
) {
    for (device, c) in held {
        if device.starts_with(super::device_ids::MIG_UUID_PREFIX) {
            if let Some(l) = place(&device) {
                add(into, (l.parent_uuid, Some(l.gpu_instance)), c);
            }
        } else {
            add(into, (device, None), c);
        }
    }
}

/// The HPC job files' jobs as consumers: a file `<gpu>` holds that GPU, `<gpu>.<gi>` that
/// GPU instance; `gpus` (the page's GPU UUID -> index) names the GPU. A file for a GPU the
/// page does not have holds nothing (its labels land nowhere either). Each job is owned by
/// its id, which its processes' Slurm cgroups (`job_<id>`) carry.
pub(super) fn hpc_consumers(
    jobs: &HashMap<String, Vec<String>>,
    gpus: &HashMap<String, u32>,
    into: &mut HashMap<EntityKey, Vec<Consumer>>,
) {
    let by_index: HashMap<u32, &String> = gpus.iter().map(|(u, i)| (*i, u)).collect();
    for (file, ids) in jobs {
        let (gpu, gi) = match file.split_once('.') {
            Some((gpu, gi)) => (gpu, Some(gi)),
            None => (file.as_str(), None),
        };
        let Some(uuid) = gpu.parse().ok().and_then(|i: u32| by_index.get(&i)) else {
            continue;
        };
        let gi = match gi.map(str::parse::<u32>) {
            None => None,
            Some(Ok(gi)) => Some(gi),
            Some(Err(_)) => continue,
        };
        for id in ids {
            let c = Consumer {
                labels: vec![(HPC_JOB_LABEL.to_string(), id.clone())],
                owner: Some(Owner::Job(id.clone())),
                replica: false,
                source: super::usage::HPC,
            };
            add(into, ((*uuid).clone(), gi), c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(label: &str, value: &str, owner: Owner) -> Consumer {
        let source = match owner {
            Owner::Job(_) => crate::attribution::usage::HPC,
            Owner::Container(_) => crate::attribution::usage::CONTAINERS,
            Owner::Pod(_) => crate::attribution::usage::KUBELET,
        };
        Consumer {
            labels: vec![(label.into(), value.into())],
            owner: Some(owner),
            replica: false,
            source,
        }
    }

    #[test]
    fn hpc_files_hold_their_gpu_or_gpu_instance() {
        let gpus = HashMap::from([("GPU-a".to_string(), 0), ("GPU-b".to_string(), 1)]);
        let jobs = HashMap::from([
            ("0".to_string(), vec!["4242".to_string()]),
            // Two jobs sharing a GPU; one listed twice.
            (
                "1".to_string(),
                vec!["7".to_string(), "8".to_string(), "7".to_string()],
            ),
            ("1.2".to_string(), vec!["9".to_string()]),
            // A GPU the page does not have.
            ("5".to_string(), vec!["10".to_string()]),
        ]);
        let mut got = HashMap::new();
        hpc_consumers(&jobs, &gpus, &mut got);
        let job = |id: &str| consumer(HPC_JOB_LABEL, id, Owner::Job(id.into()));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[&("GPU-a".to_string(), None)], [job("4242")]);
        assert_eq!(got[&("GPU-b".to_string(), None)], [job("7"), job("8")]);
        assert_eq!(got[&("GPU-b".to_string(), Some(2))], [job("9")]);
    }

    #[test]
    fn mig_devices_are_placed_on_their_instance_and_unplaced_ones_left_out() {
        let c = |name: &str| consumer("container", name, Owner::Container(name.repeat(64)));
        let held = vec![
            ("GPU-a".to_string(), c("a")),
            ("GPU-a".to_string(), c("b")),
            ("GPU-a".to_string(), c("a")),
            ("MIG-x".to_string(), c("a")),
            ("MIG-unknown".to_string(), c("b")),
        ];
        let place = |uuid: &str| {
            (uuid == "MIG-x").then(|| MigLocation {
                parent_uuid: "GPU-b".into(),
                gpu_instance: 3,
            })
        };
        let mut got = HashMap::new();
        place_consumers(held, place, &mut got);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[&("GPU-a".to_string(), None)], [c("a"), c("b")]);
        assert_eq!(got[&("GPU-b".to_string(), Some(3))], [c("a")]);
    }
}
