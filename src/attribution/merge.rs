//! The merge rules: how what the sources know (a [`Snapshot`]) becomes labels and copies of
//! the page's GPU and MIG-instance series (pod labels, per-pod copies for shared GPUs,
//! per-claim copies for DRA, `hpc_job` copies, source labels), and the maps the snapshot is
//! built from. No source is asked anything here; `sources` does that.

use super::device_ids::{self, MigLocation};
use super::nvml::Process;
use super::usage::share;
use super::{dra, kubelet, mig};
use super::{ClaimMap, ClaimRef, IdType, Options, PodMetadata, PodRef, Snapshot};
use crate::model::naming::base_units::{Op, BASE_UNITS};
use crate::model::{Page, Series};
use std::collections::HashMap;

/// Builds the claims per GPU from the kubelet's DRA devices, as dcgm-exporter's
/// `toDeviceToPodsDRA`: only the `gpu.nvidia.com` driver; each device looked up in the
/// driver's ResourceSlices; a MIG device's claim lands on its parent GPU (as upstream) and,
/// where NVML places the MIG device, on its GPU instance too; one claim per container and
/// GPU (the first listed).
pub fn claim_map(
    claims: &[kubelet::ClaimDevice],
    devices: &dyn dra::DraDevices,
    mig: &dyn Fn(&str) -> Option<MigLocation>,
    metadata: Option<&dyn PodMetadata>,
) -> ClaimMap {
    let mut out = ClaimMap::default();
    let fresh = |list: &[ClaimRef], c: &ClaimRef| {
        !list.iter().any(|x| {
            (&x.pod.namespace, &x.pod.pod, &x.pod.container)
                == (&c.pod.namespace, &c.pod.pod, &c.pod.container)
        })
    };
    for c in claims.iter().filter(|c| c.driver == dra::GPU_DRIVER) {
        let Some(device) = devices.lookup(&c.pool, &c.device) else {
            out.unresolved.push(format!("{}/{}", c.pool, c.device));
            continue;
        };
        let claim = ClaimRef {
            pod: PodRef {
                namespace: c.namespace.clone(),
                pod: c.pod.clone(),
                container: c.container.clone(),
                vgpu: None,
                meta: metadata.and_then(|m| m.lookup(&c.namespace, &c.pod)),
            },
            claim_name: c.claim_name.clone(),
            claim_namespace: c.claim_namespace.clone(),
            driver: c.driver.clone(),
            pool: c.pool.clone(),
            device: c.device.clone(),
            mig: match &device {
                dra::SliceDevice::Mig { uuid, profile, .. } => {
                    Some((profile.clone(), uuid.clone()))
                }
                dra::SliceDevice::Gpu { .. } => None,
            },
        };
        if let dra::SliceDevice::Mig { uuid, .. } = &device {
            if let Some(loc) = (!uuid.is_empty()).then(|| mig(uuid)).flatten() {
                let list = out
                    .instances
                    .entry((loc.parent_uuid, loc.gpu_instance))
                    .or_default();
                if fresh(list, &claim) {
                    list.push(claim.clone());
                }
            }
        }
        let list = out.gpus.entry(device.gpu_uuid().to_string()).or_default();
        if fresh(list, &claim) {
            list.push(claim);
        }
    }
    out.unresolved.sort();
    out.unresolved.dedup();
    out
}

/// The identity of a GPU or GPU-instance series, read from its identity labels.
struct Subject {
    gpu: String,
    uuid: String,
    device: String,
    instance: Option<String>,
    /// The host engine, when one exporter serves several.
    engine: Option<String>,
}

impl Subject {
    /// GPU and MIG-instance series start with `gpu` (links start with `nvlink`).
    fn of(m: &Series) -> Option<Subject> {
        let labels = m.labels();
        if labels.first()?.name() != "gpu" {
            return None;
        }
        let get = |n: &str| {
            labels
                .iter()
                .find(|l| l.name() == n)
                .map(|l| l.value().to_string())
        };
        let profiled = get("GPU_I_PROFILE").is_some_and(|p| !p.is_empty());
        Some(Subject {
            gpu: labels[0].value().to_string(),
            uuid: get("UUID").or_else(|| get("uuid")).unwrap_or_default(),
            device: get("device").unwrap_or_default(),
            instance: if profiled { get("GPU_I_ID") } else { None },
            engine: get(crate::model::ENGINE_LABEL),
        })
    }

    fn pod_key(&self, id_type: IdType) -> String {
        pod_key(
            &self.gpu,
            &self.uuid,
            &self.device,
            self.instance.as_deref(),
            self.engine.as_deref(),
            id_type,
        )
    }

    fn hpc_key(&self) -> String {
        match &self.instance {
            Some(gi) => format!("{}.{gi}", self.gpu),
            None => self.gpu.clone(),
        }
    }
}

/// dcgm-exporter's `GetIDOfType`: MIG series by `"<gpu>-<gi>"`, others by UUID or name.
/// With several host engines (`engine` set) every engine has a gpu 0 and an `nvidia0`: a
/// MIG instance is then keyed by its parent's UUID (`"<uuid>/<gi>"`, which
/// `device_ids::keys` also gives a MIG device), and a device name, which cannot say which
/// engine it is on, by a key no kubelet id matches.
pub(crate) fn pod_key(
    gpu: &str,
    uuid: &str,
    device: &str,
    instance: Option<&str>,
    engine: Option<&str>,
    id_type: IdType,
) -> String {
    match (instance, engine, id_type) {
        (Some(gi), None, _) => format!("{gpu}-{gi}"),
        (Some(gi), Some(_), _) => format!("{uuid}/{gi}"),
        (None, _, IdType::Uid) => uuid.to_string(),
        (None, None, IdType::DeviceName) => device.to_string(),
        (None, Some(e), IdType::DeviceName) => format!("{e}\n{device}"),
    }
}

/// Fields whose per-pod value comes from NVML's per-process data in virtual-GPU mode.
#[derive(Clone, Copy, PartialEq)]
enum PerProcess {
    SmUtil,
    MemoryMib,
}

/// `DCGM_FI_DEV_GPU_UTIL` (integer percent) and `DCGM_FI_DEV_FB_USED` (MiB).
const GPU_UTIL: u16 = 203;
const FB_USED: u16 = 252;

/// What a family of DCGM field `field` is per process, and the conversion of a legacy value
/// to the family's unit: a release names a measurement as it likes (`dcgm_gpu_utilization`,
/// `DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_GPU_UTIL_RATIO` in percent or as a 0-1 ratio), the
/// field the collector tagged the family with says which it is.
fn per_process_field(field: u16) -> Option<(PerProcess, Option<Op>)> {
    match field {
        GPU_UTIL => Some((PerProcess::SmUtil, None)),
        FB_USED => Some((PerProcess::MemoryMib, None)),
        _ => {
            let b = BASE_UNITS
                .iter()
                .find(|b| b.id == field && matches!(b.legacy_id, GPU_UTIL | FB_USED))?;
            let (kind, _) = per_process_field(b.legacy_id)?;
            Some((kind, Some(b.conv.op)))
        }
    }
}

/// How a family's series are shared among the pods on one GPU in virtual-GPU mode, where
/// it is not copied to each pod as it is.
#[derive(Clone, Copy, PartialEq)]
enum Split {
    /// Each pod gets its processes' share, beside the device's own value.
    Share(PerProcess, Option<Op>),
    /// A statistic of a `Share` family's samples between collections (`--aggregate`): it
    /// is the device's, no pod's, so it stays with the device's own series alone, where the
    /// row's pods get shares; a pod's copy would set the GPU's peak beside the pod's share.
    DeviceStat,
}

/// The per-process families of a page and the statistics of their samples, by name.
fn per_process_families(page: &Page) -> HashMap<String, Split> {
    let mut out: HashMap<String, Split> = page
        .families()
        .filter_map(|f| {
            let (kind, op) = per_process_field(f.field()?)?;
            Some((f.name().to_string(), Split::Share(kind, op)))
        })
        .collect();
    let stats: Vec<String> = page
        .families()
        .filter(|f| {
            f.stat().is_some_and(|s| {
                f.name()
                    .strip_suffix(s.suffix())
                    .is_some_and(|row| out.contains_key(row))
            })
        })
        .map(|f| f.name().to_string())
        .collect();
    out.extend(stats.into_iter().map(|name| (name, Split::DeviceStat)));
    out
}

struct LabelNames {
    pod: &'static str,
    namespace: &'static str,
    container: &'static str,
}

fn label_names(old: bool) -> LabelNames {
    if old {
        LabelNames {
            pod: "pod_name",
            namespace: "pod_namespace",
            container: "container_name",
        }
    } else {
        LabelNames {
            pod: "pod",
            namespace: "namespace",
            container: "container",
        }
    }
}

fn push(m: &mut Series, name: &str, value: &str) {
    // A label the series already has (e.g. a CSV label field) is not repeated.
    if m.label(name).is_none() {
        m.push_label(name, value);
    }
}

/// Sets a label, replacing the value it had: a DRA claim names its own pod, whatever the
/// device-plugin path said.
fn set(m: &mut Series, name: &str, value: &str) {
    match m.labels_mut().iter_mut().find(|l| l.name() == name) {
        Some(l) => l.set_value(value),
        None => push(m, name, value),
    }
}

/// Builds the series-key -> pods map from the kubelet's allocations. In virtual-GPU mode a
/// key keeps every pod on it (dcgm-exporter's `toDeviceToSharingPods`); otherwise the last
/// container listed wins (`toDeviceToPod`).
pub fn pod_map(
    allocations: &[kubelet::Allocation],
    opts: &Options,
    mig: &dyn Fn(&str) -> Option<MigLocation>,
    gpu_index: &dyn Fn(&str) -> Option<u32>,
    metadata: Option<&dyn PodMetadata>,
) -> HashMap<String, Vec<PodRef>> {
    let mut out: HashMap<String, Vec<PodRef>> = HashMap::new();
    for a in allocations {
        if !device_ids::is_gpu_resource(&a.resource, &opts.resource_names) {
            continue;
        }
        let pod = PodRef {
            namespace: a.namespace.clone(),
            pod: a.pod.clone(),
            container: a.container.clone(),
            vgpu: device_ids::shared_gpu(&a.device_id)
                .filter(|v| !v.is_empty())
                .map(str::to_string),
            meta: metadata.and_then(|m| m.lookup(&a.namespace, &a.pod)),
        };
        for key in device_ids::keys(&a.device_id, mig, gpu_index) {
            let pods = out.entry(key).or_default();
            if opts.virtual_gpus {
                if !pods.contains(&pod) {
                    pods.push(pod.clone());
                }
            } else {
                *pods = vec![pod.clone()];
            }
        }
    }
    out
}

/// The one place where what the sources know is merged into the page's GPU series.
pub fn merge(page: &mut Page, snap: &Snapshot, opts: &Options) {
    let names = label_names(opts.old_names);
    let per_process = per_process_families(page);
    page.rewrite(|name, m| {
        let Some(subject) = Subject::of(&m) else {
            return vec![m];
        };
        let kind = per_process.get(name).copied();
        let series = pod_copies(kind, m, &subject, snap, opts, &names);
        let series = claim_copies(series, &subject, snap, opts, &names);
        let mut series = hpc_copies(series, &subject, snap);
        let extra = source_labels(&subject, snap);
        for s in &mut series {
            for (k, v) in &extra {
                push(s, k, v);
            }
        }
        series
    });
}

/// The pod's labels (`pod`, `namespace`, `container`, with `uid` its `pod_uid`).
fn pod_labels(m: &mut Series, p: &PodRef, uid: bool, names: &LabelNames) {
    push(m, names.pod, &p.pod);
    push(m, names.namespace, &p.namespace);
    push(m, names.container, &p.container);
    if uid {
        if let Some(meta) = &p.meta {
            push(m, "pod_uid", &meta.uid);
        }
    }
}

/// The pod's own labels from its metadata, when asked for.
fn metadata_labels(m: &mut Series, p: &PodRef, opts: &Options) {
    if let (true, Some(meta)) = (opts.pod_labels, &p.meta) {
        for (k, v) in &meta.labels {
            push(m, k, v);
        }
    }
}

/// The series with its pod's labels: the last pod on it, or in virtual-GPU mode one copy
/// per pod (per-process fields then get each pod's share, beside the device's own value,
/// and the statistics of their samples stay the device's alone).
fn pod_copies(
    per_process: Option<Split>,
    m: Series,
    subject: &Subject,
    snap: &Snapshot,
    opts: &Options,
    names: &LabelNames,
) -> Vec<Series> {
    let pods = snap
        .pods
        .get(&subject.pod_key(opts.id_type))
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut series = Vec::new();
    if pods.is_empty() {
        series.push(m);
    } else if !opts.virtual_gpus {
        let p = pods.last().expect("not empty");
        let mut m = m;
        pod_labels(&mut m, p, opts.pod_uid, names);
        metadata_labels(&mut m, p, opts);
        series.push(m);
    } else {
        let procs = snap.processes.get(&subject.uuid);
        match (per_process, procs) {
            // The device's own value stays; each pod gets its processes' share, in the
            // family's unit.
            (Some(Split::DeviceStat), Some(_)) => series.push(m),
            (Some(Split::Share(kind, op)), Some(procs)) => {
                let gi = subject
                    .instance
                    .as_deref()
                    .and_then(|g| g.parse::<u32>().ok());
                let mut values: Vec<f64> = pods
                    .iter()
                    .map(|p| {
                        let uid = p.meta.as_ref().map(|x| x.uid.as_str());
                        let v = pod_share(procs, &snap.pid_pods, uid, gi, kind, op.is_some());
                        op.map_or(v, |op| op.apply(v))
                    })
                    .collect();
                if kind == PerProcess::SmUtil {
                    // The pods' shares never add up to more than the GPU's own value.
                    share::clamp(&mut values, m.value);
                }
                series.push(m.clone());
                for (p, value) in pods.iter().zip(values) {
                    let mut copy = m.clone();
                    pod_labels(&mut copy, p, true, names);
                    if let Some(v) = &p.vgpu {
                        push(&mut copy, "vgpu", v);
                    }
                    copy.value = value;
                    series.push(copy);
                }
            }
            _ => {
                for p in pods {
                    let mut copy = m.clone();
                    pod_labels(&mut copy, p, opts.pod_uid, names);
                    if let Some(v) = &p.vgpu {
                        push(&mut copy, "vgpu", v);
                    }
                    series.push(copy);
                }
            }
        }
    }
    series
}

/// One copy of each series per DRA claim on the GPU (or GPU instance).
fn claim_copies(
    series: Vec<Series>,
    subject: &Subject,
    snap: &Snapshot,
    opts: &Options,
    names: &LabelNames,
) -> Vec<Series> {
    let claims = match subject.instance.as_deref().map(str::parse::<u32>) {
        Some(Ok(gi)) => snap.claims.instances.get(&(subject.uuid.clone(), gi)),
        Some(Err(_)) => None,
        None => snap.claims.gpus.get(&subject.uuid),
    };
    let Some(claims) = claims.filter(|c| opts.dra && !c.is_empty()) else {
        return series;
    };
    series
        .into_iter()
        .flat_map(|s| claims.iter().map(move |c| claim_copy(&s, c, names, opts)))
        .collect()
}

/// One copy of each series per HPC job on the GPU (or GPU instance).
fn hpc_copies(series: Vec<Series>, subject: &Subject, snap: &Snapshot) -> Vec<Series> {
    let Some(jobs) = snap.hpc_jobs.get(&subject.hpc_key()) else {
        return series;
    };
    series
        .into_iter()
        .flat_map(|s| {
            jobs.iter().map(move |j| {
                let mut c = s.clone();
                push(&mut c, "hpc_job", j);
                c
            })
        })
        .collect()
}

/// The `DeviceLabelSource`s' labels for the GPU, and for the GPU instance.
fn source_labels<'a>(subject: &Subject, snap: &'a Snapshot) -> Vec<&'a (String, String)> {
    snap.gpu_labels
        .get(&subject.uuid)
        .into_iter()
        .flatten()
        .chain(
            subject
                .instance
                .as_deref()
                .and_then(|gi| gi.parse::<u32>().ok())
                .and_then(|gi| snap.instance_labels.get(&(subject.uuid.clone(), gi)))
                .into_iter()
                .flatten(),
        )
        .collect()
}

/// One claim's copy of a series: the claiming container's pod labels, replacing any the
/// series had, and the claim's `dra_*` labels.
fn claim_copy(m: &Series, c: &ClaimRef, names: &LabelNames, opts: &Options) -> Series {
    let mut m = m.clone();
    let p = &c.pod;
    set(&mut m, names.pod, &p.pod);
    set(&mut m, names.namespace, &p.namespace);
    set(&mut m, names.container, &p.container);
    if let Some(meta) = &p.meta {
        if opts.pod_uid {
            set(&mut m, "pod_uid", &meta.uid);
        }
        if opts.pod_labels {
            for (k, v) in &meta.labels {
                push(&mut m, k, v);
            }
        }
    }
    set(&mut m, "dra_claim_name", &c.claim_name);
    set(&mut m, "dra_claim_namespace", &c.claim_namespace);
    set(&mut m, "dra_driver_name", &c.driver);
    set(&mut m, "dra_pool_name", &c.pool);
    set(&mut m, "dra_device_name", &c.device);
    if let Some((profile, uuid)) = &c.mig {
        set(&mut m, "dra_mig_profile", profile);
        set(&mut m, "dra_mig_device_uuid", uuid);
    }
    m
}

/// A pod's share of a per-process field: the sum over its processes on this GPU (or GPU
/// instance), SM utilisation as each process's mean over the interval; 0 for a pod with
/// none, or whose UID is unknown.
fn pod_share(
    procs: &[Process],
    pid_pods: &HashMap<u32, String>,
    uid: Option<&str>,
    gpu_instance: Option<u32>,
    kind: PerProcess,
    exact_bytes: bool,
) -> f64 {
    let Some(uid) = uid.filter(|u| !u.is_empty()) else {
        return 0.0;
    };
    procs
        .iter()
        .filter(|p| gpu_instance.is_none() || p.gpu_instance == gpu_instance)
        .filter(|p| pid_pods.get(&p.pid).is_some_and(|u| u == uid))
        .map(|p| match kind {
            // The mean of every sample since the previous collection.
            PerProcess::SmUtil => share::interval_mean(p),
            // Whole MiB as DCGM's field reports them; exact for a family in bytes, whose
            // conversion multiplies by 2^20 again.
            PerProcess::MemoryMib if exact_bytes => {
                p.memory_bytes.unwrap_or(0) as f64 / 1_048_576.0
            }
            PerProcess::MemoryMib => (p.memory_bytes.unwrap_or(0) / (1024 * 1024)) as f64,
        })
        // From +0: `Sum` for f64 starts at -0.0, and a pod without processes would read
        // `-0` on the page.
        .fold(0.0, |sum, v| sum + v)
}

/// GPU UUID -> DCGM GPU index, from the identity labels of the page's GPU series, and the
/// MIG layout they show.
pub(super) fn gpu_indexes(page: &mut Page) -> (HashMap<String, u32>, mig::Layout) {
    let mut out = HashMap::new();
    let mut layout = mig::Layout::new();
    page.rewrite(|_, m| {
        if let Some(s) = Subject::of(&m) {
            if let Some(gi) = &s.instance {
                let profile = m.label("GPU_I_PROFILE").unwrap_or_default().to_string();
                layout.insert((s.uuid.clone(), gi.clone(), profile));
            }
            if let Ok(i) = s.gpu.parse() {
                out.entry(s.uuid).or_insert(i);
            }
        }
        vec![m]
    });
    (out, layout)
}
