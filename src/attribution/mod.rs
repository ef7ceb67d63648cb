//! The attribution stage, between collection and rendering: what the sources know about
//! who uses each GPU (the kubelet's pod allocations, NVML's MIG devices and processes, HPC
//! job files, and any `DeviceLabelSource`) merged into the page's GPU series by one piece of
//! code, `merge`. Sources are refreshed on the collection thread (`Attribution::apply`, once
//! per collection) and never during a scrape.

pub mod container;
pub mod device_ids;
pub mod dra;
pub mod hpc;
pub mod kubelet;
pub mod metrics;
pub mod mig;
pub mod nvml;
pub mod pids;
pub mod podmeta;

use crate::model::{Page, Series};
use device_ids::MigLocation;
use nvml::{NvmlView, Process};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How kubelet device ids are matched to whole-GPU series (`--kubernetes-gpu-id-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdType {
    /// The GPU UUID.
    Uid,
    /// `nvidia<N>`.
    DeviceName,
}

impl IdType {
    pub fn parse(s: &str) -> Result<IdType, String> {
        match s {
            "uid" => Ok(IdType::Uid),
            "device-name" => Ok(IdType::DeviceName),
            other => Err(format!(
                "--kubernetes-gpu-id-type {other}: expected uid or device-name"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// `-k`: map GPUs to pods through the kubelet.
    pub kubernetes: bool,
    pub kubelet_socket: PathBuf,
    pub id_type: IdType,
    /// `--nvidia-resource-names`.
    pub resource_names: Vec<String>,
    /// `--kubernetes-virtual-gpus`.
    pub virtual_gpus: bool,
    /// `-o`: `pod_name`, `pod_namespace`, `container_name`.
    pub old_names: bool,
    /// Add `pod_uid` (needs a `PodMetadata` source for the UID).
    pub pod_uid: bool,
    /// Add the pod's labels from its `PodMetadata`.
    pub pod_labels: bool,
    /// `--kubernetes-enable-dra`: copies of a GPU's series per DRA claim on it.
    pub dra: bool,
    /// `--hpc-job-mapping-dir`.
    pub hpc_dir: Option<PathBuf>,
    /// Longest a kubelet call may take (it runs on its own thread).
    pub kubelet_deadline: Duration,
    /// Longest a collection waits for the kubelet's answer before using the previous one.
    pub kubelet_wait: Duration,
    /// Longest a collection waits for NVML (it runs on its own thread; a later answer
    /// serves the next collection).
    pub nvml_wait: Duration,
    /// Where `/proc/<pid>/cgroup` lives (tests point it elsewhere).
    pub proc_root: PathBuf,
}

/// A pod's UID and labels, from the Kubernetes API (the kubelet's `List` has neither).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMeta {
    pub uid: String,
    /// Already sanitised to Prometheus label names and filtered by the allowlist.
    pub labels: Vec<(String, String)>,
}

/// Pod metadata by (namespace, pod name); plugged in by a Kubernetes API pod watch.
pub trait PodMetadata: Send + Sync {
    fn lookup(&self, namespace: &str, pod: &str) -> Option<PodMeta>;
}

/// Labels a source attaches to one device: a GPU UUID (its series and its MIG instances'
/// series) or a MIG device UUID (`MIG-…`, resolved through NVML to its instance's series).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceLabels {
    pub device_uuid: String,
    pub labels: Vec<(String, String)>,
}

/// The extension point for more attribution sources (e.g. a container runtime outside
/// Kubernetes). `device_labels` is called once per collection on the collection thread: a
/// source that talks to something slow refreshes on its own thread and returns its cache.
pub trait DeviceLabelSource: Send {
    fn name(&self) -> &'static str;
    /// The GPUs on this collection's page (UUID -> GPU index), just before
    /// `device_labels`: for sources that name GPUs by index or as "all".
    fn observe_gpus(&mut self, _gpus: &HashMap<String, u32>) {}
    fn device_labels(&mut self) -> Result<Vec<DeviceLabels>, String>;
}

/// One pod's claim on a series key.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRef {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The sharing replica (`::N`, `/vgpuN`).
    pub vgpu: Option<String>,
    pub meta: Option<PodMeta>,
}

/// One container's DRA claim on a GPU (or on a MIG device of it).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRef {
    pub pod: PodRef,
    pub claim_name: String,
    pub claim_namespace: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// (profile, MIG UUID) when the claimed device is a MIG device.
    pub mig: Option<(String, String)>,
}

/// Claims by GPU UUID, and by (GPU UUID, GPU-instance id) for claimed MIG devices.
#[derive(Default)]
pub struct ClaimMap {
    pub gpus: HashMap<String, Vec<ClaimRef>>,
    pub instances: HashMap<(String, u32), Vec<ClaimRef>>,
    /// `pool/device` of the GPU driver's claims no ResourceSlice describes, sorted, once each.
    pub unresolved: Vec<String>,
}

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

/// Everything the merge needs, built once per collection from the sources.
#[derive(Default)]
pub struct Snapshot {
    /// Series key (UUID, `nvidiaN`, `"<gpu>-<gi>"`, raw device id...) -> pods, in kubelet order.
    pub pods: HashMap<String, Vec<PodRef>>,
    /// Processes per GPU UUID, where NVML answered (virtual-GPU mode only).
    pub processes: HashMap<String, Vec<Process>>,
    /// Pod UID of each process seen.
    pub pid_pods: HashMap<u32, String>,
    /// HPC jobs by `"<gpu>"` / `"<gpu>.<gi>"`.
    pub hpc_jobs: HashMap<String, Vec<String>>,
    /// Extra labels by GPU UUID (whole GPU) or (GPU UUID, GPU-instance id).
    pub gpu_labels: HashMap<String, Vec<(String, String)>>,
    pub instance_labels: HashMap<(String, u32), Vec<(String, String)>>,
    /// DRA claims (`--kubernetes-enable-dra`).
    pub claims: ClaimMap,
}

/// The identity of a GPU or GPU-instance series, read from its identity labels.
struct Subject {
    gpu: String,
    uuid: String,
    device: String,
    instance: Option<String>,
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
        })
    }

    /// dcgm-exporter's `GetIDOfType`: MIG series by `"<gpu>-<gi>"`, others by UUID or name.
    fn pod_key(&self, id_type: IdType) -> String {
        match (&self.instance, id_type) {
            (Some(gi), _) => format!("{}-{gi}", self.gpu),
            (None, IdType::Uid) => self.uuid.clone(),
            (None, IdType::DeviceName) => self.device.clone(),
        }
    }

    fn hpc_key(&self) -> String {
        match &self.instance {
            Some(gi) => format!("{}.{gi}", self.gpu),
            None => self.gpu.clone(),
        }
    }
}

/// Fields whose per-pod value comes from NVML's per-process data in virtual-GPU mode.
#[derive(Clone, Copy, PartialEq)]
enum PerProcess {
    SmUtil,
    MemoryMib,
}

fn per_process_field(name: &str) -> Option<PerProcess> {
    match name {
        "DCGM_FI_DEV_GPU_UTIL" | "dcgm_gpu_utilization" => Some(PerProcess::SmUtil),
        "DCGM_FI_DEV_FB_USED" | "dcgm_fb_used" => Some(PerProcess::MemoryMib),
        _ => None,
    }
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
    let pod_labels = |m: &mut Series, p: &PodRef, uid: bool| {
        push(m, names.pod, &p.pod);
        push(m, names.namespace, &p.namespace);
        push(m, names.container, &p.container);
        if uid {
            if let Some(meta) = &p.meta {
                push(m, "pod_uid", &meta.uid);
            }
        }
    };
    let metadata_labels = |m: &mut Series, p: &PodRef| {
        if let (true, Some(meta)) = (opts.pod_labels, &p.meta) {
            for (k, v) in &meta.labels {
                push(m, k, v);
            }
        }
    };
    page.rewrite(|name, m| {
        let Some(subject) = Subject::of(&m) else {
            return vec![m];
        };
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
            pod_labels(&mut m, p, opts.pod_uid);
            metadata_labels(&mut m, p);
            series.push(m);
        } else {
            let procs = snap.processes.get(&subject.uuid);
            match (per_process_field(name), procs) {
                // The device's own value stays; each pod gets its processes' share.
                (Some(kind), Some(procs)) => {
                    series.push(m.clone());
                    for p in pods {
                        let mut copy = m.clone();
                        pod_labels(&mut copy, p, true);
                        if let Some(v) = &p.vgpu {
                            push(&mut copy, "vgpu", v);
                        }
                        let uid = p.meta.as_ref().map(|x| x.uid.as_str());
                        let gi = subject
                            .instance
                            .as_deref()
                            .and_then(|g| g.parse::<u32>().ok());
                        copy.value = pod_share(procs, &snap.pid_pods, uid, gi, kind);
                        series.push(copy);
                    }
                }
                _ => {
                    for p in pods {
                        let mut copy = m.clone();
                        pod_labels(&mut copy, p, opts.pod_uid);
                        if let Some(v) = &p.vgpu {
                            push(&mut copy, "vgpu", v);
                        }
                        series.push(copy);
                    }
                }
            }
        }
        let claims = match subject.instance.as_deref().map(str::parse::<u32>) {
            Some(Ok(gi)) => snap.claims.instances.get(&(subject.uuid.clone(), gi)),
            Some(Err(_)) => None,
            None => snap.claims.gpus.get(&subject.uuid),
        };
        if let Some(claims) = claims.filter(|c| opts.dra && !c.is_empty()) {
            series = series
                .into_iter()
                .flat_map(|s| {
                    let names = &names;
                    claims.iter().map(move |c| claim_copy(&s, c, names, opts))
                })
                .collect();
        }
        if let Some(jobs) = snap.hpc_jobs.get(&subject.hpc_key()) {
            series = series
                .into_iter()
                .flat_map(|s| {
                    jobs.iter().map(move |j| {
                        let mut c = s.clone();
                        push(&mut c, "hpc_job", j);
                        c
                    })
                })
                .collect();
        }
        let extra: Vec<&(String, String)> = snap
            .gpu_labels
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
            .collect();
        for s in &mut series {
            for (k, v) in &extra {
                push(s, k, v);
            }
        }
        series
    });
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
/// instance); 0 for a pod with none, or whose UID is unknown.
fn pod_share(
    procs: &[Process],
    pid_pods: &HashMap<u32, String>,
    uid: Option<&str>,
    gpu_instance: Option<u32>,
    kind: PerProcess,
) -> f64 {
    let Some(uid) = uid.filter(|u| !u.is_empty()) else {
        return 0.0;
    };
    procs
        .iter()
        .filter(|p| gpu_instance.is_none() || p.gpu_instance == gpu_instance)
        .filter(|p| pid_pods.get(&p.pid).is_some_and(|u| u == uid))
        .map(|p| match kind {
            PerProcess::SmUtil => f64::from(p.sm_util.unwrap_or(0)),
            PerProcess::MemoryMib => (p.memory_bytes.unwrap_or(0) / (1024 * 1024)) as f64,
        })
        .sum()
}

/// GPU UUID -> DCGM GPU index, from the identity labels of the page's GPU series, and the
/// MIG layout they show.
fn gpu_indexes(page: &mut Page) -> (HashMap<String, u32>, mig::Layout) {
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

/// The state of one source, for logs (once per change), /health and self-metrics.
#[derive(Default)]
struct SourceState {
    error: Option<String>,
}

/// The sources, their caches and their health. Owned by the collection thread.
pub struct Attribution {
    opts: Options,
    kubelet: Option<kubelet::Refresher>,
    /// The last kubelet answer, used while a newer one is on its way.
    allocations: kubelet::Listing,
    /// Whether `begin` asked the sources for this collection already.
    begun: bool,
    /// NVML (on its own thread) and the MIG placements.
    placer: mig::Placer,
    /// Why NVML is not there, as reported at start (with `-k`).
    nvml_down: Option<String>,
    hpc: Option<hpc::HpcDir>,
    metadata: Option<Arc<dyn PodMetadata>>,
    dra: Option<Arc<dyn dra::DraDevices>>,
    sources: Vec<Box<dyn DeviceLabelSource>>,
    states: BTreeMap<&'static str, SourceState>,
    metrics: Option<metrics::Metrics>,
}

impl Attribution {
    /// Sets up the sources the options ask for. Nothing here is fatal: a source that cannot
    /// start is reported (log, self-metric, /health) and the exporter runs without it.
    /// `nvml` is `None` when it was not asked for (no `-k`), else the library or why not.
    pub fn new(opts: Options, nvml: Option<Result<Box<dyn NvmlView>, String>>) -> Attribution {
        let asked = nvml.is_some();
        let (placer, nvml_error) = mig::Placer::new(
            nvml.unwrap_or_else(|| Err("NVML is not loaded without -k".to_string())),
        );
        let nvml_error = nvml_error.filter(|_| asked);
        let mut a = Attribution {
            kubelet: None,
            allocations: kubelet::Listing::default(),
            begun: false,
            placer,
            nvml_down: None,
            hpc: opts.hpc_dir.clone().map(hpc::HpcDir::new),
            metadata: None,
            dra: None,
            sources: Vec::new(),
            states: BTreeMap::new(),
            metrics: None,
            opts,
        };
        if a.opts.kubernetes {
            match kubelet::Kubelet::new(&a.opts.kubelet_socket)
                .and_then(|k| kubelet::Refresher::start(k, a.opts.kubelet_deadline))
            {
                Ok(k) => a.kubelet = Some(k),
                Err(e) => a.report("kubelet", Err(e)),
            }
            match nvml_error {
                Some(e) => {
                    let e = format!("{e}: MIG devices named by MIG UUID are not mapped to pods, and shared GPUs get no per-pod utilisation or memory");
                    a.nvml_down = Some(e.clone());
                    a.report("nvml", Err(e));
                }
                None => a.report("nvml", Ok(())),
            }
        }
        a
    }

    /// Self-metrics for the sources' health, registered with the exporter's own metrics.
    pub fn with_metrics(mut self, m: metrics::Metrics) -> Attribution {
        for (name, st) in &self.states {
            m.set(name, st.error.is_none());
        }
        self.metrics = Some(m);
        self
    }

    /// Plugs in a Kubernetes API pod watch (UIDs and labels).
    pub fn with_metadata(mut self, md: Arc<dyn PodMetadata>) -> Attribution {
        self.metadata = Some(md);
        self
    }

    /// Plugs in the DRA driver's ResourceSlices (`--kubernetes-enable-dra`).
    pub fn with_dra(mut self, devices: Arc<dyn dra::DraDevices>) -> Attribution {
        self.dra = Some(devices);
        self
    }

    /// Adds a device-label source (see `DeviceLabelSource`).
    pub fn with_source(mut self, s: Box<dyn DeviceLabelSource>) -> Attribution {
        self.sources.push(s);
        self
    }

    /// Whether anything would change the page.
    pub fn active(&self) -> bool {
        self.opts.kubernetes || self.hpc.is_some() || !self.sources.is_empty()
    }

    /// Problems worth showing on /health (it stays 200: GPU metrics are still served).
    pub fn notes(&self) -> Vec<String> {
        self.states
            .iter()
            .filter_map(|(name, st)| st.error.as_ref().map(|e| format!("{name}: {e}")))
            .collect()
    }

    /// Logs a source's state when it changes (so a down kubelet warns once, not per tick).
    fn report(&mut self, source: &'static str, result: Result<(), String>) {
        let st = self.states.entry(source).or_default();
        match result {
            Ok(()) => {
                if let Some(old) = st.error.take() {
                    tracing::info!("{source}: working again (was: {old})");
                }
            }
            Err(e) => {
                if st.error.as_deref() != Some(&e) {
                    if st.error.is_none() {
                        tracing::warn!(
                            "{e} (GPU metrics are still served, without what {source} would add)"
                        );
                    } else {
                        tracing::debug!("{e}");
                    }
                }
                st.error = Some(e);
                if let Some(m) = &self.metrics {
                    m.error(source);
                }
            }
        }
        if let Some(m) = &self.metrics {
            m.set(source, self.states[source].error.is_none());
        }
    }

    /// The MIG configuration changed (the collection rebuilt its watches): every MIG
    /// placement is forgotten and asked again.
    pub fn mig_changed(&mut self) {
        self.placer.layout_changed();
    }

    /// Placed MIG devices remembered (tests of the bound and of re-partitions).
    pub fn mig_cached(&self) -> usize {
        self.placer.cached()
    }

    /// Starts refreshing the slow sources; called before DCGM is read, so that they work
    /// while it is.
    pub fn begin(&mut self) {
        if let Some(k) = self.kubelet.as_mut() {
            k.trigger();
        }
        self.begun = true;
    }

    /// Refreshes every source and merges what they know into `page`.
    pub fn apply(&mut self, page: &mut Page) {
        if !self.active() {
            return;
        }
        if !std::mem::take(&mut self.begun) {
            self.begin();
            self.begun = false;
        }
        let (gpus, layout) = gpu_indexes(page);
        self.placer.observe(layout);
        let mut snap = Snapshot::default();

        let wait = self.opts.kubelet_wait;
        if let Some(answer) = self.kubelet.as_mut().and_then(|k| k.answer(wait)) {
            match answer {
                Ok(a) => {
                    self.allocations = a;
                    self.report("kubelet", Ok(()));
                }
                Err(e) => {
                    // Stale pods are worse than none: a failing kubelet clears the labels.
                    self.allocations = kubelet::Listing::default();
                    self.report("kubelet", Err(e));
                }
            }
        }

        // The sources first: the MIG devices they name are placed with the kubelet's.
        let mut extra = Vec::new();
        let mut results = Vec::new();
        for s in &mut self.sources {
            s.observe_gpus(&gpus);
            match s.device_labels() {
                Ok(l) => {
                    extra.extend(l);
                    results.push((s.name(), Ok(())));
                }
                Err(e) => results.push((s.name(), Err(e))),
            }
        }
        for (name, r) in results {
            self.report(name, r);
        }

        let allocations = std::mem::take(&mut self.allocations);
        let is_mig = |id: &str| id.starts_with(device_ids::MIG_UUID_PREFIX);
        let mut wanted: BTreeSet<String> = allocations
            .devices
            .iter()
            .filter(|a| device_ids::is_gpu_resource(&a.resource, &self.opts.resource_names))
            .map(|a| device_ids::strip_vgpu_suffix(&a.device_id))
            .filter(|id| is_mig(id))
            .map(str::to_string)
            .collect();
        wanted.extend(
            extra
                .iter()
                .map(|d| device_ids::strip_vgpu_suffix(&d.device_uuid))
                .filter(|id| is_mig(id))
                .map(str::to_string),
        );
        let dra = self.dra.clone().filter(|_| self.opts.dra);
        if let Some(dra) = &dra {
            // MIG devices claimed through DRA are placed on their GPU instance by NVML too.
            for c in allocations
                .claims
                .iter()
                .filter(|c| c.driver == dra::GPU_DRIVER)
            {
                if let Some(dra::SliceDevice::Mig { uuid, .. }) = dra.lookup(&c.pool, &c.device) {
                    if !uuid.is_empty() {
                        wanted.insert(uuid);
                    }
                }
            }
        }
        // Per-process data of shared GPUs, when a pod holds one.
        let process_gpus: Vec<String> = if self.opts.virtual_gpus
            && allocations
                .devices
                .iter()
                .any(|a| device_ids::is_gpu_resource(&a.resource, &self.opts.resource_names))
        {
            gpus.keys().cloned().collect()
        } else {
            Vec::new()
        };
        let round = self
            .placer
            .refresh(&wanted, process_gpus, self.opts.nvml_wait);

        let placer = &self.placer;
        let mig = |id: &str| placer.lookup(id);
        let index = |uuid: &str| gpus.get(uuid).copied();
        snap.pods = pod_map(
            &allocations.devices,
            &self.opts,
            &mig,
            &index,
            self.metadata.as_deref(),
        );
        if let Some(dra) = &dra {
            snap.claims = claim_map(
                &allocations.claims,
                dra.as_ref(),
                &mig,
                self.metadata.as_deref(),
            );
            if let Some(p) = dra.problem() {
                self.report("dra", Err(p));
            } else if dra.synced() {
                let r = match snap.claims.unresolved.as_slice() {
                    [] => Ok(()),
                    missing => Err(format!(
                        "no {} ResourceSlice describes claimed device(s) {}: their claims get no dra_* labels",
                        dra::GPU_DRIVER,
                        missing.join(", ")
                    )),
                };
                self.report("dra", r);
            }
        }
        self.allocations = allocations;

        let mut nvml_problems: Vec<String> = round.problem.iter().cloned().collect();
        if let Some(answers) = round.processes.filter(|_| !snap.pods.is_empty()) {
            let mut failed = None;
            for (uuid, r) in answers {
                match r {
                    Ok(p) => {
                        for proc in &p {
                            if let Some(uid) = pids::pod_uid_of_pid(&self.opts.proc_root, proc.pid)
                            {
                                snap.pid_pods.insert(proc.pid, uid);
                            }
                        }
                        snap.processes.insert(uuid, p);
                    }
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                nvml_problems.push(format!("per-process data: {e}"));
            }
        }
        if !round.unplaced.is_empty() {
            nvml_problems.push(unplaced_text(&round.unplaced));
        }
        if let Some(m) = &self.metrics {
            m.unplaced(round.unplaced.len(), round.newly_unplaced);
        }
        let down = self.nvml_down.clone();
        let current = self.states.get("nvml").map(|st| st.error.clone());
        match (nvml_problems.is_empty(), down) {
            // NVML missing was counted once, at start; it is only restored after a
            // different problem.
            (true, Some(down)) => {
                if current.flatten().as_deref() != Some(down.as_str()) {
                    self.report("nvml", Err(down));
                }
            }
            (true, None) => {
                if current.is_some() {
                    self.report("nvml", Ok(()));
                }
            }
            (false, _) => self.report("nvml", Err(nvml_problems.join("; "))),
        }

        if let Some(h) = self.hpc.as_mut() {
            let (jobs, errors) = h.read();
            snap.hpc_jobs = jobs;
            let r = if errors.is_empty() {
                Ok(())
            } else {
                Err(format!("--hpc-job-mapping-dir: {}", errors.join("; ")))
            };
            self.report("hpc", r);
        }

        for d in extra {
            if d.device_uuid.starts_with(device_ids::MIG_UUID_PREFIX) {
                if let Some(l) = self.placer.lookup(&d.device_uuid) {
                    snap.instance_labels
                        .entry((l.parent_uuid, l.gpu_instance))
                        .or_default()
                        .extend(d.labels);
                }
            } else {
                snap.gpu_labels
                    .entry(d.device_uuid)
                    .or_default()
                    .extend(d.labels);
            }
        }
        merge(page, &snap, &self.opts);
    }
}

/// The `/health` text for MIG devices that could not be placed: the first few, with why.
fn unplaced_text(unplaced: &BTreeMap<String, String>) -> String {
    const SHOWN: usize = 4;
    let mut parts: Vec<String> = unplaced
        .iter()
        .take(SHOWN)
        .map(|(u, why)| format!("{u} ({why})"))
        .collect();
    if unplaced.len() > SHOWN {
        parts.push(format!("and {} more", unplaced.len() - SHOWN));
    }
    format!(
        "{} MIG device(s) cannot be placed on a GPU instance, their pods and labels are left out: {}",
        unplaced.len(),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests;
