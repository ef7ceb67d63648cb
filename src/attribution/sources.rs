//! The sources and their orchestration: `Attribution` sets them up, refreshes them once per
//! collection (the kubelet on its own thread, NVML through the MIG placer, HPC files,
//! `DeviceLabelSource`s, the pod and DRA caches), keeps their health for logs, `/health` and
//! self-metrics, and hands one `Snapshot` to `merge`.

use super::merge::{claim_map, gpu_indexes, merge, pod_map};
use super::nvml::NvmlView;
use super::{device_ids, dra, hpc, kubelet, metrics, mig, outside, pids, usage};
use super::{DeviceLabelSource, DeviceLabels, Options, PodMetadata, Snapshot};
use crate::model::Page;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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
    /// `--usage-accounting`.
    usage: Option<usage::Accountant>,
    /// The last utilisation samples per GPU, for NVML asks that get none.
    carry: usage::share::Carry,
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
            usage: opts.usage.clone().map(usage::Accountant::new),
            carry: usage::share::Carry::default(),
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
        } else if let (Some(e), Some(_)) = (nvml_error, &a.opts.usage) {
            let e = format!("{e}: usage accounting gets no processes (shares 0)");
            a.nvml_down = Some(e.clone());
            a.report("nvml", Err(e));
        }
        a
    }

    /// Self-metrics for the sources' health, registered with the exporter's own metrics.
    pub(crate) fn with_metrics(mut self, m: metrics::Metrics) -> Attribution {
        for (name, st) in &self.states {
            m.set(name, st.error.is_none());
        }
        self.metrics = Some(m);
        self
    }

    /// Plugs in a Kubernetes API pod watch (UIDs and labels).
    pub(crate) fn with_metadata(mut self, md: Arc<dyn PodMetadata>) -> Attribution {
        self.metadata = Some(md);
        self
    }

    /// Plugs in the DRA driver's ResourceSlices (`--kubernetes-enable-dra`).
    pub(crate) fn with_dra(mut self, devices: Arc<dyn dra::DraDevices>) -> Attribution {
        self.dra = Some(devices);
        self
    }

    /// Adds a device-label source (see `DeviceLabelSource`).
    pub(crate) fn with_source(mut self, s: Box<dyn DeviceLabelSource>) -> Attribution {
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
    pub(crate) fn mig_changed(&mut self) {
        self.placer.layout_changed();
    }

    /// Placed MIG devices remembered (tests of the bound and of re-partitions).
    #[cfg(test)]
    pub(crate) fn mig_cached(&self) -> usize {
        self.placer.cached()
    }

    /// Starts refreshing the slow sources; called before DCGM is read, so that they work
    /// while it is.
    pub(crate) fn begin(&mut self) {
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
        // Usage reads the devices before the merge copies their series.
        let readings = self.usage.as_ref().map(|u| u.read(page, self.opts.id_type));
        let mut snap = Snapshot::default();
        self.take_kubelet_answer();
        // The sources first: the MIG devices they name are placed with the kubelet's.
        let extra = self.source_labels(&gpus);
        let allocations = std::mem::take(&mut self.allocations);
        let dra = self.dra.clone().filter(|_| self.opts.dra);
        let wanted = self.wanted_mig_devices(&allocations, &extra, dra.as_deref());
        // Per-process data of shared GPUs (or of every GPU, for usage), when a pod holds one.
        let pods_hold_gpus = allocations
            .devices
            .iter()
            .any(|a| device_ids::is_gpu_resource(&a.resource, &self.opts.resource_names));
        let usage = self.usage.is_some();
        let process_gpus: Vec<String> = if (self.opts.virtual_gpus || usage) && pods_hold_gpus
            || usage && (!extra.is_empty() || self.hpc.is_some())
        {
            gpus.keys().cloned().collect()
        } else {
            Vec::new()
        };
        let round = self
            .placer
            .refresh(&wanted, process_gpus, self.opts.nvml_wait);
        self.map_pods_and_claims(&mut snap, &allocations, &gpus, dra.as_deref());
        if let Some(readings) = &readings {
            self.pod_consumers(&mut snap, readings, &allocations, &gpus);
        }
        self.allocations = allocations;
        self.read_hpc(&mut snap);
        if readings.is_some() {
            // Before the processes: whether to read them depends on who holds a device.
            self.outside_consumers(&mut snap, &gpus);
        }
        self.read_processes(&mut snap, round);
        self.place_source_labels(&mut snap, extra);
        merge(page, &snap, &self.opts);
        if let Some(readings) = readings {
            self.account(page, readings, &snap);
        }
    }

    /// `--usage-accounting`: the pods holding each device, every pod on it (the merge's map
    /// keeps only the last one unless --kubernetes-virtual-gpus).
    fn pod_consumers(
        &self,
        snap: &mut Snapshot,
        readings: &[usage::readings::Reading],
        allocations: &kubelet::Listing,
        gpus: &HashMap<String, u32>,
    ) {
        let all;
        let pods = if self.opts.virtual_gpus {
            &snap.pods
        } else {
            let opts = super::Options {
                virtual_gpus: true,
                ..self.opts.clone()
            };
            let placer = &self.placer;
            all = pod_map(
                &allocations.devices,
                &opts,
                &|id: &str| placer.lookup(id),
                &|uuid: &str| gpus.get(uuid).copied(),
                self.metadata.as_deref(),
            );
            &all
        };
        let consumers =
            usage::pods::consumers(readings, pods, self.opts.old_names, self.opts.pod_uid);
        for (key, list) in consumers {
            snap.consumers.entry(key).or_default().extend(list);
        }
    }

    /// Books this collection's usage and adds its series to the page.
    fn account(
        &mut self,
        page: &mut Page,
        readings: Vec<usage::readings::Reading>,
        snap: &Snapshot,
    ) {
        let Some(u) = self.usage.as_mut() else { return };
        let now = std::time::Instant::now();
        // Sources failing now tell nothing about who left (see `usage::Inputs::failed`).
        // The HPC files fail one by one: theirs are `unknown_consumers`.
        let failed: BTreeSet<&'static str> = self
            .states
            .iter()
            .filter(|(name, st)| st.error.is_some() && **name != usage::HPC)
            .map(|(name, _)| *name)
            .collect();
        let inputs = usage::Inputs {
            consumers: &snap.consumers,
            processes: &snap.processes,
            owners: &snap.pid_owners,
            failed: &failed,
            unknown: &snap.unknown_consumers,
        };
        let dropped = u.account(readings, &inputs, now);
        u.add_to(page, now);
        if let Some(m) = &self.metrics {
            for (gpu, n) in dropped {
                m.usage_dropped(&gpu, n);
            }
        }
    }

    /// Takes the kubelet's latest answer, waiting `kubelet_wait` at most.
    fn take_kubelet_answer(&mut self) {
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
    }

    /// Every `DeviceLabelSource`'s labels for this collection.
    fn source_labels(&mut self, gpus: &HashMap<String, u32>) -> Vec<DeviceLabels> {
        let mut extra = Vec::new();
        let mut results = Vec::new();
        for s in &mut self.sources {
            s.observe_gpus(gpus);
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
        extra
    }

    /// The MIG devices named by UUID (by the kubelet, the sources or DRA claims) that NVML
    /// must place on their GPU instance.
    fn wanted_mig_devices(
        &self,
        allocations: &kubelet::Listing,
        extra: &[DeviceLabels],
        dra: Option<&dyn dra::DraDevices>,
    ) -> BTreeSet<String> {
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
        if let Some(dra) = dra {
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
        wanted
    }

    /// The pods per series key and, with DRA, the claims per GPU; reports DRA's health.
    fn map_pods_and_claims(
        &mut self,
        snap: &mut Snapshot,
        allocations: &kubelet::Listing,
        gpus: &HashMap<String, u32>,
        dra: Option<&dyn dra::DraDevices>,
    ) {
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
        let Some(dra) = dra else { return };
        snap.claims = claim_map(&allocations.claims, dra, &mig, self.metadata.as_deref());
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

    /// NVML's per-process answers (with each process's pod) and NVML's health.
    fn read_processes(&mut self, snap: &mut Snapshot, round: mig::Round) {
        let mut nvml_problems: Vec<String> = round.problem.iter().cloned().collect();
        let wanted = !snap.pods.is_empty() || !snap.consumers.is_empty();
        if let Some(answers) = round.processes.filter(|_| wanted) {
            let mut failed = None;
            let asked: std::collections::HashSet<&str> =
                answers.keys().map(String::as_str).collect();
            self.carry.keep(&asked);
            for (uuid, r) in answers {
                match r {
                    Ok(mut p) => {
                        self.carry.fill(&uuid, &mut p);
                        for proc in &p {
                            let (pod, owner) =
                                pids::pod_and_owner_of_pid(&self.opts.proc_root, proc.pid);
                            if let Some(owner) = owner.filter(|_| self.usage.is_some()) {
                                snap.pid_owners.insert(proc.pid, owner);
                            }
                            if let Some(uid) = pod {
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
        self.report_nvml(nvml_problems);
    }

    fn report_nvml(&mut self, nvml_problems: Vec<String>) {
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
    }

    /// The HPC job files.
    fn read_hpc(&mut self, snap: &mut Snapshot) {
        if let Some(h) = self.hpc.as_mut() {
            let read = h.read();
            snap.hpc_jobs = read.jobs;
            snap.hpc_unknown = read.unknown;
            let r = if read.errors.is_empty() {
                Ok(())
            } else {
                Err(format!("--hpc-job-mapping-dir: {}", read.errors.join("; ")))
            };
            self.report("hpc", r);
        }
    }

    /// Usage accounting's consumers outside Kubernetes: the label sources' holders
    /// (containers) and the HPC files' jobs.
    fn outside_consumers(&mut self, snap: &mut Snapshot, gpus: &HashMap<String, u32>) {
        let held: Vec<_> = self
            .sources
            .iter_mut()
            .flat_map(|s| s.consumers())
            .collect();
        let placer = &self.placer;
        outside::place_consumers(held, |u| placer.lookup(u), &mut snap.consumers);
        // A file kept from before its failed read says nothing of who holds its GPU now:
        // its jobs are unknown (kept by the books, their shares unknown).
        let (unknown, known): (HashMap<String, Vec<String>>, _) = snap
            .hpc_jobs
            .iter()
            .map(|(file, jobs)| (file.clone(), jobs.clone()))
            .partition(|(file, _)| snap.hpc_unknown.contains(file));
        outside::hpc_consumers(&known, gpus, &mut snap.consumers);
        let mut unknown_consumers = HashMap::new();
        outside::hpc_consumers(&unknown, gpus, &mut unknown_consumers);
        snap.unknown_consumers = unknown_consumers
            .into_iter()
            .map(|(k, cs)| (k, cs.into_iter().map(|c| c.labels).collect()))
            .collect();
    }

    /// The sources' labels by GPU, and by GPU instance for the MIG devices NVML placed.
    fn place_source_labels(&self, snap: &mut Snapshot, extra: Vec<DeviceLabels>) {
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
