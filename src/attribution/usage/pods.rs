//! Pods as consumers: the kubelet's allocations (every pod on a device, whatever
//! `--kubernetes-virtual-gpus` says) placed on the page's devices, each pod once per device.

use super::readings::Reading;
use super::{Consumer, EntityKey, Owner};
use crate::attribution::PodRef;
use std::collections::HashMap;

/// The pods holding each device on the page. A pod is one consumer per device even when
/// several of its containers share it (labelled with the first, in kubelet order): its
/// processes are told apart by pod UID only.
pub(crate) fn consumers(
    readings: &[Reading],
    pods: &HashMap<String, Vec<PodRef>>,
    old_names: bool,
    pod_uid: bool,
) -> HashMap<EntityKey, Vec<Consumer>> {
    let mut out: HashMap<EntityKey, Vec<Consumer>> = HashMap::new();
    for r in readings {
        let Some(list) = pods.get(&r.pod_key).filter(|l| !l.is_empty()) else {
            continue;
        };
        let mut seen: Vec<(&str, &str)> = Vec::new();
        let consumers = out.entry(r.key.clone()).or_default();
        for p in list {
            if seen.contains(&(p.namespace.as_str(), p.pod.as_str())) {
                continue;
            }
            seen.push((&p.namespace, &p.pod));
            consumers.push(consumer(p, old_names, pod_uid));
        }
    }
    out
}

fn consumer(p: &PodRef, old_names: bool, pod_uid: bool) -> Consumer {
    let (pod, namespace, container) = if old_names {
        ("pod_name", "pod_namespace", "container_name")
    } else {
        ("pod", "namespace", "container")
    };
    let mut labels = vec![
        (pod.to_string(), p.pod.clone()),
        (namespace.to_string(), p.namespace.clone()),
        (container.to_string(), p.container.clone()),
    ];
    if let Some(v) = &p.vgpu {
        labels.push(("vgpu".to_string(), v.clone()));
    }
    let uid = p
        .meta
        .as_ref()
        .map(|m| m.uid.clone())
        .filter(|u| !u.is_empty());
    if let (true, Some(uid)) = (pod_uid, &uid) {
        labels.push(("pod_uid".to_string(), uid.clone()));
    }
    Consumer {
        labels,
        owner: uid.map(Owner::Pod),
        replica: p.vgpu.is_some(),
        source: super::KUBELET,
    }
}
