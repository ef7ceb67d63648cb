//! Which entities are exported, with which identity labels and which fields: the device
//! selectors (`-d`, `-s`, `-p`) applied to the discovered topology.

use crate::collect::fields::level;
use crate::collect::topology::{Instance, Topology};
use crate::config::counters::{Counter, CounterField, Counters};
use crate::config::emulate::UpstreamVersion;
use crate::config::selector::{check_exists, IdSet, NotOnNode, Selector};
use crate::model::naming::PromType;
use dcgm_sys::{Entity, EntityGroup, LinkState};

/// The entity types dcgm-exporter has a collector for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Gpu,
    Switch,
    Link,
    Cpu,
    CpuCore,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Gpu => "GPU",
            Kind::Switch => "NvSwitch",
            Kind::Link => "NvLink",
            Kind::Cpu => "CPU",
            Kind::CpuCore => "CPU core",
        }
    }

    /// Whether a field of entity level `lvl` is watched on this kind (as dcgm-exporter
    /// decides: global fields everywhere, MIG and vGPU fields on GPUs).
    pub(crate) fn accepts(self, lvl: u32) -> bool {
        lvl == level::NONE
            || match self {
                Kind::Gpu => matches!(lvl, level::GPU | level::GPU_I | level::GPU_CI | level::VGPU),
                Kind::Switch => lvl == level::SWITCH,
                Kind::Link => lvl == level::LINK,
                Kind::Cpu => lvl == level::CPU,
                Kind::CpuCore => lvl == level::CPU_CORE,
            }
    }
}

/// One exported entity.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    pub entity: Entity,
    /// Identity labels in exposition order, the hostname label included.
    pub labels: Vec<(&'static str, String)>,
    /// The physical GPU, for GPU, instance and GPU-link targets.
    pub gpu: Option<u32>,
}

impl Target {
    /// Identity labels followed by the entity's CSV label fields, in exposition order.
    pub(crate) fn labels_with<'a>(
        &'a self,
        csv: &'a std::collections::HashMap<Entity, Vec<(String, String)>>,
    ) -> Vec<(&'a str, &'a str)> {
        let mut l: Vec<(&str, &str)> = self.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if let Some(extra) = csv.get(&self.entity) {
            l.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
        l
    }
}

/// The targets of one kind and the CSV rows (indices into `Counters::all`) watched on them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WatchSet {
    pub kind: Kind,
    pub targets: Vec<Target>,
    pub counters: Vec<usize>,
    /// Distinct DCGM field ids of `counters`.
    pub fields: Vec<u16>,
}

pub(crate) struct Options<'a> {
    pub gpus: &'a Selector,
    pub switches: &'a Selector,
    pub cpus: &'a Selector,
    pub compute_instances: bool,
    pub use_old_namespace: bool,
    pub replace_blanks_in_model_name: bool,
    /// `None` with `--no-hostname`.
    pub hostname: Option<&'a str>,
    /// The release emulated: it names the hostname label.
    pub emulate: UpstreamVersion,
}

impl Options<'_> {
    fn hostname_label(&self) -> &'static str {
        hostname_label(self.emulate)
    }
}

/// The hostname label of an entity's series, and of every series the exporter adds (node
/// series such as `DCGM_EXP_GPU_COUNT` too): `hostname` from upstream 4.8.3 (d5e5f51,
/// #655), `Hostname` before; links always had `hostname` (upstream's link template never
/// used `Hostname`).
pub(crate) fn hostname_label(emulate: UpstreamVersion) -> &'static str {
    if emulate.at_least_4_8_3() {
        "hostname"
    } else {
        "Hostname"
    }
}

pub(crate) fn plan(
    topo: &Topology,
    counters: &Counters,
    opts: &Options,
) -> Result<Vec<WatchSet>, NotOnNode> {
    let (cpus, cores) = cpu_targets(topo, opts)?;
    let gpus = gpu_targets(topo, opts)?;
    let exported_gpus: Vec<u32> = gpus.iter().filter_map(|t| t.gpu).collect();
    let links = link_targets(topo, opts, &exported_gpus)?;
    let sets = [
        (Kind::Gpu, gpus),
        (Kind::Switch, switch_targets(topo, opts)?),
        (Kind::Link, links),
        (Kind::Cpu, cpus),
        (Kind::CpuCore, cores),
    ];
    let mut out = Vec::new();
    for (kind, targets) in sets {
        if targets.is_empty() {
            continue;
        }
        let rows: Vec<usize> = counters
            .all
            .iter()
            .enumerate()
            .filter(|(_, c)| dcgm_level(c).is_some_and(|l| kind.accepts(l)))
            .map(|(i, _)| i)
            .collect();
        let mut fields: Vec<u16> = rows
            .iter()
            .filter_map(|&i| dcgm_id(&counters.all[i]))
            .collect();
        fields.sort_unstable();
        fields.dedup();
        // Only label rows (e.g. the driver version) apply: nothing to export for this kind.
        if !rows
            .iter()
            .any(|&i| counters.all[i].prom_type != PromType::Label)
        {
            continue;
        }
        out.push(WatchSet {
            kind,
            targets,
            counters: rows,
            fields,
        });
    }
    Ok(out)
}

/// The parts of `-d`, `-s` and `-p` given explicitly (anything but `f`) that select no
/// entity on this node, as `/health` notes: `-d i` on a node without MIG exports no GPU at
/// all, which must not pass silently.
pub(crate) fn unmatched(topo: &Topology, opts: &Options) -> Result<Vec<String>, NotOnNode> {
    let mut notes = Vec::new();
    let mut note = |flag: &str, what: &str| {
        notes.push(format!(
            "{flag} selects no {what} on this node: none is exported"
        ))
    };
    let d = opts.gpus;
    if !d.flex && gpu_targets(topo, opts)?.is_empty() {
        note(
            "-d/--devices",
            match (&d.major, &d.minor) {
                (Some(_), None) => "GPU",
                (None, Some(_)) => "GPU instance (MIG)",
                _ => "GPU or GPU instance",
            },
        );
    }
    let s = opts.switches;
    if s.major.is_some() && switch_targets(topo, opts)?.is_empty() {
        note("-s/--switch-devices", "NvSwitch");
    }
    if let Some(minor) = &s.minor {
        let any = topo.links.iter().any(|l| {
            l.id.parent == EntityGroup::Switch
                && l.state == LinkState::Up
                && selected(minor, u32::from(l.id.index))
        });
        if !any {
            note("-s/--switch-devices", "NvSwitch link (NvLink)");
        }
    }
    let (cpus, cores) = cpu_targets(topo, opts)?;
    if opts.cpus.major.is_some() && cpus.is_empty() {
        note("-p/--cpu-devices", "CPU");
    }
    if opts.cpus.minor.is_some() && cores.is_empty() {
        note("-p/--cpu-devices", "CPU core");
    }
    Ok(notes)
}

fn dcgm_level(c: &Counter) -> Option<u32> {
    match &c.field {
        CounterField::Dcgm(m) => Some(m.entity_level),
        CounterField::Exp(_) => None,
    }
}

fn dcgm_id(c: &Counter) -> Option<u16> {
    match &c.field {
        CounterField::Dcgm(m) => Some(m.id),
        CounterField::Exp(_) => None,
    }
}

fn model_name(model: &str, opts: &Options) -> String {
    if opts.replace_blanks_in_model_name {
        model.split_whitespace().collect::<Vec<_>>().join("-")
    } else {
        model.to_string()
    }
}

fn with_hostname(
    mut labels: Vec<(&'static str, String)>,
    opts: &Options,
) -> Vec<(&'static str, String)> {
    if let Some(h) = opts.hostname {
        labels.push((opts.hostname_label(), h.to_string()));
    }
    labels
}

fn gpu_labels(
    topo: &Topology,
    gpu: u32,
    inst: Option<&Instance>,
    opts: &Options,
) -> Vec<(&'static str, String)> {
    let g = topo.gpu(gpu);
    let uuid_label = if opts.use_old_namespace {
        "uuid"
    } else {
        "UUID"
    };
    let mut l = vec![
        ("gpu", gpu.to_string()),
        (uuid_label, g.map(|g| g.uuid.clone()).unwrap_or_default()),
        (
            "pci_bus_id",
            g.map(|g| g.pci_bus_id.clone()).unwrap_or_default(),
        ),
        ("device", format!("nvidia{gpu}")),
        (
            "modelName",
            g.map(|g| model_name(&g.model, opts)).unwrap_or_default(),
        ),
    ];
    if let Some(i) = inst {
        l.push(("GPU_I_PROFILE", i.profile.clone()));
        l.push(("GPU_I_ID", i.nvml_instance_id.to_string()));
        if let Some(ci) = i.compute_instance {
            l.push(("GPU_CI_ID", ci.to_string()));
        }
    }
    with_hostname(l, opts)
}

fn selected(set: &IdSet, id: u32) -> bool {
    match set {
        IdSet::All => true,
        IdSet::Ids(ids) => ids.contains(&id),
    }
}

pub(crate) fn gpu_targets(topo: &Topology, opts: &Options) -> Result<Vec<Target>, NotOnNode> {
    let sel = opts.gpus;
    let gpu_ids: Vec<u32> = topo.gpus.iter().map(|g| g.id).collect();
    let gi_ids: Vec<u32> = topo
        .instances
        .iter()
        .filter(|i| i.compute_instance.is_none())
        .map(|i| i.entity.id)
        .collect();
    if let Some(m) = &sel.major {
        // A selected GPU that is lost exists; it is skipped, not a selector error.
        let known: Vec<u32> = gpu_ids.iter().chain(&topo.lost_gpus).copied().collect();
        check_exists("-d", "GPU", m, &known)?;
    }
    if let Some(m) = &sel.minor {
        check_exists("-d", "GPU instance", m, &gi_ids)?;
    }
    let mut out = Vec::new();
    let push_instance = |out: &mut Vec<Target>, gi: &Instance| {
        out.push(Target {
            entity: gi.entity,
            labels: gpu_labels(topo, gi.gpu, Some(gi), opts),
            gpu: Some(gi.gpu),
        });
        if opts.compute_instances {
            for ci in topo
                .instances
                .iter()
                .filter(|c| c.compute_instance.is_some() && c.gpu_instance == gi.entity.id)
            {
                out.push(Target {
                    entity: ci.entity,
                    labels: gpu_labels(topo, ci.gpu, Some(ci), opts),
                    gpu: Some(ci.gpu),
                });
            }
        }
    };
    for g in &topo.gpus {
        let whole = Target {
            entity: Entity::gpu(g.id),
            labels: gpu_labels(topo, g.id, None, opts),
            gpu: Some(g.id),
        };
        if sel.flex {
            if topo.mig_enabled(g.id) {
                for gi in topo.gpu_instances_of(g.id) {
                    push_instance(&mut out, gi);
                }
            } else {
                out.push(whole);
            }
            continue;
        }
        if sel.major.as_ref().is_some_and(|m| selected(m, g.id)) {
            out.push(whole);
        }
        if let Some(minor) = &sel.minor {
            for gi in topo
                .gpu_instances_of(g.id)
                .filter(|gi| selected(minor, gi.entity.id))
            {
                push_instance(&mut out, gi);
            }
        }
    }
    Ok(out)
}

fn switch_targets(topo: &Topology, opts: &Options) -> Result<Vec<Target>, NotOnNode> {
    let sel = opts.switches;
    if let Some(m) = &sel.major {
        check_exists("-s", "NvSwitch", m, &topo.switches)?;
    }
    Ok(topo
        .switches
        .iter()
        .filter(|&&s| sel.flex || sel.major.as_ref().is_some_and(|m| selected(m, s)))
        .map(|&s| Target {
            entity: Entity::new(EntityGroup::Switch, s),
            // Each switch keeps its own id (dcgm-exporter labels every switch nvswitch0).
            labels: with_hostname(vec![("nvswitch", format!("nvswitch{s}"))], opts),
            gpu: None,
        })
        .collect())
}

/// UP links of the selected switches and of every exported GPU.
fn link_targets(
    topo: &Topology,
    opts: &Options,
    exported_gpus: &[u32],
) -> Result<Vec<Target>, NotOnNode> {
    let sel = opts.switches;
    let switch_link_ids: Vec<u32> = {
        let mut v: Vec<u32> = topo
            .links
            .iter()
            .filter(|l| l.id.parent == EntityGroup::Switch)
            .map(|l| u32::from(l.id.index))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    if let Some(m) = &sel.minor {
        check_exists("-s", "NvLink", m, &switch_link_ids)?;
    }
    let mut out = Vec::new();
    for l in topo.links.iter().filter(|l| l.state == LinkState::Up) {
        let parent = u32::from(l.id.parent_id);
        let nvlink = ("nvlink", l.id.index.to_string());
        let labels = match l.id.parent {
            EntityGroup::Switch => {
                let switch_ok = sel.flex
                    || sel
                        .minor
                        .as_ref()
                        .is_some_and(|m| selected(m, u32::from(l.id.index)))
                        && sel.major.as_ref().is_none_or(|m| selected(m, parent));
                if !switch_ok {
                    continue;
                }
                vec![nvlink, ("nvswitch", format!("nvswitch{parent}"))]
            }
            EntityGroup::Gpu => {
                if !exported_gpus.contains(&parent) {
                    continue;
                }
                let g = topo.gpu(parent);
                vec![
                    nvlink,
                    ("gpu", parent.to_string()),
                    ("gpu_uuid", g.map(|g| g.uuid.clone()).unwrap_or_default()),
                    (
                        "pci_bus_id",
                        g.map(|g| g.pci_bus_id.clone()).unwrap_or_default(),
                    ),
                    ("device", format!("nvidia{parent}")),
                    (
                        "model_name",
                        g.map(|g| model_name(&g.model, opts)).unwrap_or_default(),
                    ),
                ]
            }
            _ => continue,
        };
        out.push(Target {
            entity: Entity::new(EntityGroup::Link, l.id.pack()),
            // Links carry `hostname` in every release (upstream's link template).
            labels: match opts.hostname {
                Some(h) => [labels, vec![("hostname", h.to_string())]].concat(),
                None => labels,
            },
            gpu: (l.id.parent == EntityGroup::Gpu).then_some(parent),
        });
    }
    Ok(out)
}

fn cpu_targets(topo: &Topology, opts: &Options) -> Result<(Vec<Target>, Vec<Target>), NotOnNode> {
    let sel = opts.cpus;
    let cpu_ids: Vec<u32> = topo.cpus.iter().map(|c| c.id).collect();
    let core_ids: Vec<u32> = topo
        .cpus
        .iter()
        .flat_map(|c| c.cores.iter().copied())
        .collect();
    if let Some(m) = &sel.major {
        check_exists("-p", "CPU", m, &cpu_ids)?;
    }
    if let Some(m) = &sel.minor {
        check_exists("-p", "CPU core", m, &core_ids)?;
    }
    let mut cpus = Vec::new();
    let mut cores = Vec::new();
    for c in &topo.cpus {
        if sel.flex || sel.major.as_ref().is_some_and(|m| selected(m, c.id)) {
            let mut labels = with_hostname(vec![("cpu", c.id.to_string())], opts);
            // 4.8.3 added the CPU's serial number where DCGM reports one.
            if opts.emulate.at_least_4_8_3() && !c.serial.is_empty() {
                labels.push(("cpu_serial", c.serial.clone()));
            }
            cpus.push(Target {
                entity: Entity::new(EntityGroup::Cpu, c.id),
                labels,
                gpu: None,
            });
        }
        for &core in &c.cores {
            if sel.flex || sel.minor.as_ref().is_some_and(|m| selected(m, core)) {
                cores.push(Target {
                    entity: Entity::new(EntityGroup::CpuCore, core),
                    labels: with_hostname(
                        vec![("cpucore", core.to_string()), ("cpu", c.id.to_string())],
                        opts,
                    ),
                    gpu: None,
                });
            }
        }
    }
    Ok((cpus, cores))
}

/// Leaves `refused` fields, and the CSV rows reading them, out of a watch set.
pub(super) fn drop_fields(
    set: &mut WatchSet,
    counters: &Counters,
    refused: &std::collections::HashSet<u16>,
) {
    if refused.is_empty() {
        return;
    }
    set.fields.retain(|f| !refused.contains(f));
    set.counters
        .retain(|&i| !refused.contains(&super::field_id(&counters.all[i])));
}

/// The CSV names of a watch set's rows reading `field` (what users know it as).
pub(super) fn row_names(set: &WatchSet, counters: &Counters, field: u16) -> Vec<String> {
    let mut names: Vec<String> = set
        .counters
        .iter()
        .map(|&i| &counters.all[i])
        .filter(|c| super::field_id(c) == field)
        .map(|c| c.name.clone())
        .collect();
    names.dedup();
    if names.is_empty() {
        names.push(super::field_name(field).to_string());
    }
    names
}
