//! XID error descriptions for the `err_msg` label of `DCGM_FI_DEV_XID_ERRORS` series, from
//! NVIDIA's XID documentation (etc/data/xid-descriptions.csv, the same texts dcgm-exporter
//! uses, so dashboards keep matching).

use crate::model::node::Instance;
use dcgm_sys::{Entity, EntityGroup};
use std::collections::HashMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("../../etc/data/xid-descriptions.csv");

fn table() -> &'static HashMap<i64, String> {
    static T: OnceLock<HashMap<i64, String>> = OnceLock::new();
    T.get_or_init(|| {
        let mut r = csv::ReaderBuilder::new().from_reader(TABLE.as_bytes());
        r.records()
            .filter_map(Result::ok)
            .filter_map(|rec| Some((rec.get(0)?.parse().ok()?, rec.get(1)?.to_string())))
            .collect()
    })
}

/// The description of an XID, or "Unknown Error" outside the table (as dcgm-exporter).
pub(crate) fn describe(xid: i64) -> &'static str {
    table()
        .get(&xid)
        .map(String::as_str)
        .unwrap_or("Unknown Error")
}

/// Which entities' XIDs each exported GPU or MIG-instance series counts. DCGM stores an XID
/// on the one entity NVML attributed it to (`DcgmCacheManager::RecordXidFor{Gpu,
/// GpuInstance,ComputeInstance}`) and a watch of an entity reads only its own, but an
/// instance's users are hit by what hits its GPU, and an XID of an instance without a
/// series of its own must show somewhere. So a series counts the XIDs of its own entity,
/// of the entities it lies in (a GPU instance: its GPU; a compute instance: its GPU
/// instance and GPU), and of the instances within it that have no series of their own
/// (compute instances without `--compute-instances`; every instance when only the whole
/// GPU is exported), each of those on its nearest exported ancestor only.
pub(crate) fn sources(instances: &[Instance], targets: &[Entity]) -> HashMap<Entity, Vec<Entity>> {
    let gi = |id: u32| Entity::new(EntityGroup::GpuInstance, id);
    // Each instance's ancestors, nearest first.
    let ancestors = |i: &Instance| -> Vec<Entity> {
        match i.compute_instance {
            Some(_) => vec![gi(i.gpu_instance), Entity::gpu(i.gpu)],
            None => vec![Entity::gpu(i.gpu)],
        }
    };
    let mut out: HashMap<Entity, Vec<Entity>> = HashMap::new();
    for &t in targets {
        let mut from = vec![t];
        if let Some(i) = instances.iter().find(|i| i.entity == t) {
            from.extend(ancestors(i));
        }
        out.insert(t, from);
    }
    for i in instances.iter().filter(|i| !targets.contains(&i.entity)) {
        let nearest = ancestors(i).into_iter().find(|a| targets.contains(a));
        if let Some(list) = nearest.and_then(|a| out.get_mut(&a)) {
            list.push(i.entity);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::model::node::Instance;
    use dcgm_sys::Entity;
    #[test]
    fn known_and_unknown_xids() {
        assert_eq!(super::describe(0), "No Error");
        assert_eq!(super::describe(79), "GPU has fallen off the bus");
        assert_eq!(super::describe(172), "Uncorrectable SRAM Error");
        assert_eq!(super::describe(9999), "Unknown Error");
        assert_eq!(super::table().len(), 173);
    }

    fn instance(entity: Entity, gpu: u32, gpu_instance: u32, ci: Option<u32>) -> Instance {
        Instance {
            entity,
            gpu,
            gpu_instance,
            nvml_instance_id: 0,
            compute_instance: ci,
            profile: String::new(),
        }
    }

    #[test]
    fn xids_count_on_instances_from_their_gpu_and_unexported_compute_instances() {
        use dcgm_sys::EntityGroup::{ComputeInstance, GpuInstance};
        let (gpu, gi, ci0, ci1) = (
            Entity::gpu(0),
            Entity::new(GpuInstance, 3),
            Entity::new(ComputeInstance, 5),
            Entity::new(ComputeInstance, 6),
        );
        let other = Entity::new(GpuInstance, 4);
        let instances = [
            instance(gi, 0, 3, None),
            instance(ci0, 0, 3, Some(0)),
            instance(ci1, 0, 3, Some(1)),
            instance(other, 0, 4, None),
        ];
        // Without --compute-instances: the GPU instance takes its GPU's and its compute
        // instances' XIDs; the other instance its GPU's only.
        let s = super::sources(&instances, &[gi, other]);
        assert_eq!(s[&gi], [gi, gpu, ci0, ci1]);
        assert_eq!(s[&other], [other, gpu]);
        // With them: each compute instance takes its GPU instance's and GPU's.
        let s = super::sources(&instances, &[gi, ci0, ci1, other]);
        assert_eq!(s[&gi], [gi, gpu]);
        assert_eq!(s[&ci1], [ci1, gi, gpu]);
        // Only the whole GPU exported: every instance's XIDs are its.
        let s = super::sources(&instances, &[gpu]);
        assert_eq!(s[&gpu], [gpu, gi, ci0, ci1, other]);
        // A GPU without MIG: its own only.
        assert_eq!(
            super::sources(&[], &[Entity::gpu(1)])[&Entity::gpu(1)],
            [Entity::gpu(1)]
        );
    }
}
